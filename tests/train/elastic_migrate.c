/* An elastic run that grows in memory (mpirun -np 2): two ranks train a
 * few steps under data parallelism, start two more processes of this
 * program (comm_spawn) and move their state onto the four with
 * par_engine_migrate. For each case (ZeRO stage before -> after, precision,
 * tensor parallelism after):
 *  - the migrated engine's parameters (the fp32 masters under mixed
 *    precision), first and second moments (par_engine_get_state) equal the
 *    old engine's bit for bit, and so do its step counter and data position;
 *  - a 4-rank engine that loads the checkpoint the old ranks saved at the
 *    same step, on the same grown communicator, holds the same state bit
 *    for bit (par_engine_get_state, par_engine_get_params), the same data
 *    position, and the next three steps' losses and gradient norms on both
 *    are equal to the bit, and so are the states after them;
 *  - four fresh processes (a new MPI_COMM_WORLD, comm_spawn'ed apart) that
 *    load that checkpoint hold the same state and give the same three
 *    losses, as a relaunched run would;
 *  - the old engine, going on alone on its two ranks, gives the same losses
 *    within 1e-6 relative (a sum over 4 ranks instead of 2: fp32 rounding,
 *    the bound of zero_reshard; 1e-4 in bf16, whose gradients are rounded
 *    to 8 bits after partial sums that differ between 2 and 4 ranks).
 * And on the same two ranks (no new ones) a migration changes the layout
 * in place (ZeRO-0 -> 3, the same state); one from an engine whose
 * optimizer state is on NVMe, or to a model that is not the old run's,
 * fails on every rank, naming the cause. Exits non-zero on failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/parallel.h>

#include "harness.h"

static par_gpt_config_t mc = {.layers = 2, .hidden = 24, .heads = 4, .seq = 18, .vocab = 256};
enum { GLOBAL = 4, BEFORE = 3, AFTER = 3, NEW = 2 };

typedef struct {
  int zero_old, zero_new, tp_new, pp_new;
  par_precision_t prec;
} case_t;
static const case_t cases[] = {
    {0, 0, 1, 1, PAR_PREC_FP32}, {3, 3, 1, 1, PAR_PREC_FP32}, {1, 2, 1, 1, PAR_PREC_FP32},
    {2, 3, 1, 1, PAR_PREC_BF16}, {0, 1, 2, 1, PAR_PREC_FP32}, {3, 1, 1, 2, PAR_PREC_FP32},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

static par_layout_t layout(int dp, int tp, int pp, int zero, par_precision_t prec) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = dp, lay.tp = tp, lay.pp = pp, lay.zero_stage = zero, lay.precision = prec;
  lay.microbatch = GLOBAL / dp, lay.global_batch = GLOBAL;
  return lay;
}
static par_optim_config_t optim_cfg(void) {
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  oc.lr = 1e-2, oc.warmup = 2, oc.weight_decay = 0.01;
  return oc;
}
static par_engine_options_t options(MPI_Comm comm) {
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 10, eo.threads = 1, eo.seed = 3, eo.comm = comm, eo.collective_timeout_s = 120;
  return eo;
}
static par_engine_t *new_engine(MPI_Comm comm, const case_t *k) {
  int n;
  MPI_Comm_size(comm, &n);
  par_layout_t lay = layout(n / (k->tp_new * k->pp_new), k->tp_new, k->pp_new, k->zero_new, k->prec);
  par_optim_config_t oc = optim_cfg();
  par_engine_options_t eo = options(comm);
  return make_engine(&mc, &lay, &oc, &eo);
}

/* The three arrays of e's state, whole (3 x np floats). */
static float *state_of(par_engine_t *e, size_t np) {
  float *s = malloc(3 * np * sizeof *s);
  static const char *const arrays[] = {"params", "m", "v"};
  for (int a = 0; a < 3; a++)
    CHECK(par_engine_get_state(e, arrays[a], s + (size_t)a * np) == STRATA_OK, "get_state %s: %s", arrays[a],
          par_engine_error(e));
  return s;
}

static size_t differ(const float *a, const float *b, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof *a) != 0;
  return bad;
}

static void steps(par_engine_t *e, par_data_t *d, double *loss, double *norm, const char *who) {
  for (int i = 0; i < AFTER; i++) {
    par_step_t st;
    CHECK(par_engine_step(e, d, &st) == STRATA_OK, "%s: step: %s", who, par_engine_error(e));
    loss[i] = st.loss, norm[i] = st.grad_norm;
  }
}

/* What the grown ranks found, for rank 0 of the parents: the migrated
 * engine's state right after the move and its next losses. */
typedef struct {
  float *state;
  double loss[AFTER];
} ref_t;

/* On every rank of grown (old: the parent's engine, NULL on the new ranks;
 * the parents' state and data too): migrate, load alike, compare. */
static void grown_run(MPI_Comm grown, const case_t *k, par_engine_t *old, par_data_t *dold, const float *before,
                      const char *path, ref_t *ref) {
  size_t np = par_gpt_param_count(&mc);
  char who[96], err[1024];
  snprintf(who, sizeof who, "zero %d -> %d tp %d pp %d %s", k->zero_old, k->zero_new, k->tp_new, k->pp_new,
           k->prec == PAR_PREC_BF16 ? "bf16" : "fp32");
  /* migrated: from the old engine, into a data handle of its own (the old
   * engine goes on with dold afterwards) */
  par_data_t *dm = markov_data(mc.seq), *dl = markov_data(mc.seq);
  if (dold) par_data_set_position(dm, par_data_position(dold));
  int n;
  MPI_Comm_size(grown, &n);
  par_layout_t lay = layout(n / (k->tp_new * k->pp_new), k->tp_new, k->pp_new, k->zero_new, k->prec);
  par_optim_config_t oc = optim_cfg();
  par_engine_options_t eo = options(MPI_COMM_NULL);
  long step = old ? BEFORE : -1;
  par_engine_t *mig = NULL;
  int rc = par_engine_migrate(old, grown, &mc, &lay, &oc, &eo, dm, &step, &mig, err, sizeof err);
  CHECK(rc == STRATA_OK && mig, "%s: migrate: %s", who, err);
  if (rc) MPI_Abort(MPI_COMM_WORLD, 1);
  CHECK(step == BEFORE, "%s: migrated step %ld, not %d", who, step, BEFORE);
  /* loaded: the checkpoint saved at the same step */
  par_engine_t *ld = new_engine(grown, k);
  long lstep = -1;
  CHECK(par_engine_load(ld, path, dl, &lstep) == STRATA_OK && lstep == BEFORE, "%s: load: %s", who,
        par_engine_error(ld));
  CHECK(par_data_position(dm) == par_data_position(dl), "%s: data position %llu migrated, %llu loaded", who,
        (unsigned long long)par_data_position(dm), (unsigned long long)par_data_position(dl));
  float *sm = state_of(mig, np), *sl = state_of(ld, np);
  size_t bad = differ(sm, sl, 3 * np);
  CHECK(bad == 0, "%s: %zu of %zu elements of the state differ between migrated and loaded", who, bad, 3 * np);
  if (before) { /* the parents: the old engine's own state */
    bad = differ(sm, before, 3 * np);
    CHECK(bad == 0, "%s: %zu of %zu elements of the state differ from the old engine's", who, bad, 3 * np);
  }
  size_t nl = local_count(par_engine_model(mig));
  float *pm = malloc(nl * sizeof *pm), *pl = malloc(nl * sizeof *pl);
  CHECK(par_engine_get_params(mig, pm) == STRATA_OK && par_engine_get_params(ld, pl) == STRATA_OK &&
            differ(pm, pl, nl) == 0,
        "%s: par_engine_get_params differ between migrated and loaded", who);
  CHECK(par_engine_initial_loss(mig) == par_engine_initial_loss(ld), "%s: initial loss %.17g migrated, %.17g loaded",
        who, par_engine_initial_loss(mig), par_engine_initial_loss(ld));
  double lm[AFTER], gm[AFTER], ll[AFTER], gl[AFTER];
  steps(mig, dm, lm, gm, who), steps(ld, dl, ll, gl, who);
  for (int i = 0; i < AFTER; i++)
    CHECK(lm[i] == ll[i] && gm[i] == gl[i], "%s: step %d: loss %.17g norm %.17g migrated, %.17g %.17g loaded", who,
          BEFORE + 1 + i, lm[i], gm[i], ll[i], gl[i]);
  float *am = state_of(mig, np), *al = state_of(ld, np);
  bad = differ(am, al, 3 * np);
  CHECK(bad == 0, "%s: after %d steps, %zu elements of the state differ", who, AFTER, bad);
  if (ref) {
    ref->state = sm, sm = NULL;
    memcpy(ref->loss, lm, sizeof lm);
  }
  free(sm), free(sl), free(am), free(al), free(pm), free(pl);
  par_engine_destroy(mig), par_engine_destroy(ld);
  par_data_destroy(dm), par_data_destroy(dl);
}

/* The new processes' and the parents' failures, summed on the parents. */
static void join_fails(MPI_Comm grown, int child) {
  int mine = child ? fails : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, grown);
  if (!child && rank == 0) fails += all;
}

/* A fresh run of 4 processes (their own MPI_COMM_WORLD): loads the
 * checkpoint, then its state and three losses go to the parents' rank 0. */
static void fresh_run(MPI_Comm grown, const case_t *k, const char *path) {
  size_t np = par_gpt_param_count(&mc);
  par_engine_t *e = new_engine(MPI_COMM_WORLD, k);
  par_data_t *d = markov_data(mc.seq);
  long step = -1;
  CHECK(par_engine_load(e, path, d, &step) == STRATA_OK && step == BEFORE, "fresh load: %s", par_engine_error(e));
  float *s = state_of(e, np);
  double l[AFTER], g[AFTER];
  steps(e, d, l, g, "fresh");
  int wr;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  if (wr == 0) {
    MPI_Send(s, (int)(3 * np), MPI_FLOAT, 0, 1, grown);
    MPI_Send(l, AFTER, MPI_DOUBLE, 0, 2, grown);
  }
  free(s);
  par_engine_destroy(e);
  par_data_destroy(d);
}

/* Every rank of grown migrates to a model of 3 layers from the old one's 2. */
static void wrong_model(MPI_Comm grown, par_engine_t *old, par_data_t *d) {
  par_gpt_config_t other = mc;
  other.layers = 3;
  par_layout_t lay = layout(4, 1, 1, 0, PAR_PREC_FP32);
  par_optim_config_t oc = optim_cfg();
  par_engine_options_t eo = options(MPI_COMM_NULL);
  par_engine_t *e = NULL;
  long step = 0;
  char err[1024] = "";
  int rc = par_engine_migrate(old, grown, &other, &lay, &oc, &eo, d, &step, &e, err, sizeof err);
  CHECK(rc == STRATA_ESHAPE && !e && strstr(err, "layers=2") && strstr(err, "layers=3"), "another model: rc %d: %s",
        rc, err);
}

static void child_main(MPI_Comm grown, int argc, char **argv) {
  harness_name = "elastic_migrate (new rank)";
  MPI_Comm_rank(grown, &rank);
  MPI_Comm_size(grown, &ranks);
  if (argc < 4) MPI_Abort(MPI_COMM_WORLD, 1);
  const case_t *k = &cases[atoi(argv[2])];
  if (!strcmp(argv[1], "--fresh")) {
    fresh_run(grown, k, argv[3]);
  } else if (!strcmp(argv[1], "--wrong")) {
    par_data_t *d = markov_data(mc.seq);
    wrong_model(grown, NULL, d);
    par_data_destroy(d);
  } else {
    grown_run(grown, k, NULL, NULL, NULL, argv[3], NULL);
  }
  join_fails(grown, 1);
  MPI_Comm_free(&grown);
}

static MPI_Comm spawn(const char *self, const char *mode, int c, const char *path, int n) {
  char num[16];
  snprintf(num, sizeof num, "%d", c);
  char *args[] = {(char *)mode, num, (char *)path, NULL};
  MPI_Comm grown;
  char err[1024];
  if (comm_spawn(MPI_COMM_WORLD, n, self, args, MPI_INFO_NULL, &grown, err, sizeof err) != STRATA_OK) {
    fprintf(stderr, "elastic_migrate: %s\n", err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return grown;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm grown;
  char err[1024];
  if (comm_spawned(&grown, err, sizeof err) != STRATA_OK) {
    fprintf(stderr, "elastic_migrate: %s\n", err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (grown != MPI_COMM_NULL) {
    child_main(grown, argc, argv);
    MPI_Finalize();
    return 0;
  }
  harness_name = "elastic_migrate";
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != 2) {
    if (rank == 0) fprintf(stderr, "elastic_migrate: run with mpirun -np 2\n");
    MPI_Finalize();
    return 1;
  }
  char dir[512], self[4096];
  snprintf(dir, sizeof dir, "%s/strata_elastic_migrate_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (rank == 0 && !mkdtemp(dir)) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (!realpath(argv[0], self)) MPI_Abort(MPI_COMM_WORLD, 1); /* the new processes run this program */
  size_t np = par_gpt_param_count(&mc);
  for (int c = 0; c < NCASES; c++) {
    const case_t *k = &cases[c];
    char path[600];
    snprintf(path, sizeof path, "%s/case%d.h5", dir, c);
    par_layout_t lay = layout(2, 1, 1, k->zero_old, k->prec);
    par_optim_config_t oc = optim_cfg();
    par_engine_options_t eo = options(MPI_COMM_WORLD);
    par_engine_t *old = make_engine(&mc, &lay, &oc, &eo);
    par_data_t *d = markov_data(mc.seq);
    par_step_t st;
    for (int i = 0; i < BEFORE; i++)
      CHECK(par_engine_step(old, d, &st) == STRATA_OK, "old step: %s", par_engine_error(old));
    CHECK(par_engine_save(old, path, d, BEFORE, NULL, 0) == STRATA_OK, "save: %s", par_engine_error(old));
    float *before = state_of(old, np);
    for (int a = 0; a < 3; a++) { /* (a state of zeros would compare equal everywhere) */
      size_t nz = 0;
      for (size_t i = 0; i < np; i++) nz += before[(size_t)a * np + i] != 0;
      CHECK(nz > np / 2, "case %d: array %d of the old state holds %zu non-zeros of %zu", c, a, nz, np);
    }
    ref_t ref = {0};
    grown = spawn(self, "--child", c, path, NEW);
    grown_run(grown, k, old, d, before, path, &ref);
    join_fails(grown, 0);
    MPI_Comm_free(&grown);
    /* the old engine goes on alone: the same losses up to the order of the
     * sums (in bf16 the gradients are rounded to 8 bits after each rank's
     * partial sum, and those differ between 2 and 4 ranks) */
    double l[AFTER], g[AFTER], tol = k->prec == PAR_PREC_FP32 ? 1e-6 : 1e-4;
    steps(old, d, l, g, "old");
    for (int i = 0; i < AFTER && rank == 0; i++)
      CHECK(fabs(l[i] - ref.loss[i]) <= tol * fabs(ref.loss[i]), "case %d: step %d loss %.9g on 2 ranks, %.9g "
            "migrated to 4 (rel %.2g > %g)", c, BEFORE + 1 + i, l[i], ref.loss[i],
            fabs(l[i] - ref.loss[i]) / fabs(ref.loss[i]), tol);
    par_engine_destroy(old);
    par_data_destroy(d);
    /* a fresh run loading the checkpoint */
    grown = spawn(self, "--fresh", c, path, 4);
    if (rank == 0) {
      float *s = malloc(3 * np * sizeof *s);
      double fl[AFTER];
      MPI_Recv(s, (int)(3 * np), MPI_FLOAT, 2, 1, grown, MPI_STATUS_IGNORE);
      MPI_Recv(fl, AFTER, MPI_DOUBLE, 2, 2, grown, MPI_STATUS_IGNORE);
      size_t bad = differ(s, ref.state, 3 * np);
      CHECK(bad == 0, "case %d: %zu elements of a fresh run's loaded state differ from the migrated one", c, bad);
      for (int i = 0; i < AFTER; i++)
        CHECK(fl[i] == ref.loss[i], "case %d: step %d loss %.17g in a fresh run, %.17g migrated", c,
              BEFORE + 1 + i, fl[i], ref.loss[i]);
      free(s);
    }
    join_fails(grown, 0);
    MPI_Comm_free(&grown);
    free(before), free(ref.state);
    if (rank == 0)
      printf("case %d (zero %d -> %d, tp %d, pp %d, %s): migrated = loaded = fresh run, bit for bit\n", c,
             k->zero_old, k->zero_new, k->tp_new, k->pp_new, k->prec == PAR_PREC_BF16 ? "bf16" : "fp32");
  }
  { /* on the same ranks: a new layout (ZeRO-0 -> 3) in place; and an old
     * engine whose optimizer state is on NVMe: refused, naming it */
    size_t np = par_gpt_param_count(&mc);
    par_optim_config_t oc = optim_cfg();
    par_engine_options_t eo = options(MPI_COMM_WORLD);
    for (int nvme = 0; nvme < 2; nvme++) {
      par_layout_t lay = layout(2, 1, 1, nvme ? 1 : 0, PAR_PREC_FP32), to = layout(2, 1, 1, 3, PAR_PREC_FP32);
      if (nvme) lay.offload_optimizer = PAR_TIER_NVME;
      eo.offload_dir = dir;
      par_engine_t *old = make_engine(&mc, &lay, &oc, &eo), *e = NULL;
      par_data_t *d = markov_data(mc.seq);
      par_step_t st;
      CHECK(par_engine_step(old, d, &st) == STRATA_OK, "in place: a step: %s", par_engine_error(old));
      long step = 1;
      int rc = par_engine_migrate(old, MPI_COMM_WORLD, &mc, &to, &oc, &eo, d, &step, &e, err, sizeof err);
      if (nvme) {
        CHECK(rc == STRATA_EUNSUPPORTED && !e && strstr(err, "NVMe"), "NVMe offload: rc %d: %s", rc, err);
      } else {
        CHECK(rc == STRATA_OK && e, "in place: %s", err);
        float *a = state_of(old, np), *b = e ? state_of(e, np) : NULL;
        CHECK(b && differ(a, b, 3 * np) == 0, "in place: the state differs after a migration to ZeRO-3");
        free(a), free(b);
      }
      par_engine_destroy(e);
      par_engine_destroy(old);
      par_data_destroy(d);
    }
  }
  { /* a migration to another model: refused on every rank, naming both */
    par_layout_t lay = layout(2, 1, 1, 0, PAR_PREC_FP32);
    par_optim_config_t oc = optim_cfg();
    par_engine_options_t eo = options(MPI_COMM_WORLD);
    par_engine_t *old = make_engine(&mc, &lay, &oc, &eo);
    par_data_t *d = markov_data(mc.seq);
    grown = spawn(self, "--wrong", 0, "-", NEW);
    wrong_model(grown, old, d);
    par_engine_destroy(old);
    par_data_destroy(d);
  }
  join_fails(grown, 0);
  MPI_Comm_free(&grown);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "elastic_migrate: cannot remove %s\n", dir);
  }
  char detail[64];
  snprintf(detail, sizeof detail, "%d cases", (int)NCASES);
  return harness_finish(detail);
}
