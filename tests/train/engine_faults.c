/* The engine's collective answers to failures, on 2 or 3 ranks (mpirun):
 *  - a failure of one rank's forward (its data holds a token the model's
 *    vocabulary lacks) is every rank's, in the same step, with that rank's
 *    message: no rank is left waiting;
 *  - a stop flag raised on one rank only stops every rank after the same
 *    step (par_step_t.stop), and par_train_run saves a checkpoint there;
 *  - a loss that grows past diverge_factor ends par_train_run on every rank
 *    with res.diverged, and a non-finite one skips the update;
 *  - a model and layout that cannot fit the memory a rank has is refused
 *    before anything is allocated, with a layout that fits;
 * each under ZeRO stages 0 to 3 (a failing rank's forward under ZeRO-3
 * leaves the others inside the pass's parameter gathers: the failed rank
 * replays them). Exits non-zero on failure. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <strata/parallel.h>
#include <string.h>
#include <unistd.h>

#include "bad_tokens.h"

static int rank, ranks, fails;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "engine_faults rank %d, ZeRO-%d: line %d: ", rank, zero, __LINE__);          \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

static par_gpt_config_t mc = {.layers = 1, .hidden = 16, .heads = 2, .seq = 16, .vocab = 256};

static int zero; /* the ZeRO stage of the cases */

static par_engine_t *engine(double lr, const char *opt) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = ranks, lay.microbatch = 2, lay.global_batch = 2 * ranks, lay.zero_stage = zero;
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  oc.lr = lr, oc.name = opt, oc.clip = 0, oc.schedule = "constant";
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 100, eo.threads = 1, eo.collective_timeout_s = 60;
  par_engine_t *e = NULL;
  char err[512];
  if (par_engine_create(&e, &mc, &lay, &oc, &eo, err, sizeof err)) {
    fprintf(stderr, "engine_faults: %s\n", err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return e;
}

static par_data_t *markov(void) {
  par_data_options_t o = PAR_DATA_DEFAULTS;
  o.seq = 16, o.markov_tokens = 1 << 14;
  par_data_t *d = NULL;
  char err[512];
  if (par_data_open(&o, &d, err, sizeof err)) MPI_Abort(MPI_COMM_WORLD, 1);
  return d;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  char dir[] = "/tmp/strata-engine-faults-XXXXXX";
  if (rank == 0 && !mkdtemp(dir)) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  int last = ranks - 1;
  for (zero = 0; zero <= 3; zero++) {
    /* 1. The last rank's forward fails at step 3: every rank returns its error. */
    {
      par_engine_t *e = engine(1e-3, "adamw");
      par_data_t *good = markov(), *bad = rank == last ? bad_tokens(dir, rank, 16) : NULL;
      par_step_t st;
      int rc = 0, step = 0;
      for (step = 1; step <= 5 && rc == 0; step++)
        rc = par_engine_step(e, step == 3 && bad ? bad : good, &st);
      CHECK(rc == STRATA_EINVAL && step - 1 == 3, "rc %d after step %d, want EINVAL at step 3", rc,
            step - 1);
      char want[64];
      snprintf(want, sizeof want, "[rank %d] forward: par_gpt_forward: tokens[", last);
      CHECK(strstr(par_engine_error(e), want) != NULL, "message '%s' lacks '%s'",
            par_engine_error(e), want);
      CHECK(par_engine_error_all_ranks(e), "error not marked as every rank's");
      /* the engine goes on: the next step works on every rank */
      CHECK(par_engine_step(e, good, &st) == 0, "step after the failure: %s", par_engine_error(e));
      par_data_destroy(bad);
      par_data_destroy(good);
      par_engine_destroy(e);
    }

    /* 2. A stop flag on the last rank only: every rank stops after step 4,
     *    with a checkpoint at step 4. */
    {
      static volatile sig_atomic_t flag;
      par_engine_t *e = engine(1e-3, "adamw");
      par_data_t *d = markov();
      par_engine_watch_stop(e, &flag);
      par_step_t st;
      int stopped_at = 0;
      for (int step = 1; step <= 8 && !stopped_at; step++) {
        if (step == 4 && rank == last) flag = 1;
        CHECK(par_engine_step(e, d, &st) == 0, "step %d: %s", step, par_engine_error(e));
        if (st.stop) stopped_at = step;
      }
      CHECK(stopped_at == 4, "stopped at %d, want 4", stopped_at);
      flag = 0;
      par_engine_destroy(e);
      /* the loop saves there */
      e = engine(1e-3, "adamw");
      char ckpt[700];
      snprintf(ckpt, sizeof ckpt, "%s/stop%d.h5", dir, zero);
      par_train_options_t to = PAR_TRAIN_OPTIONS_DEFAULTS;
      to.steps = 100, to.ckpt_path = ckpt, to.ckpt_final = 0, to.stop = &flag;
      par_train_result_t res;
      if (rank == last) flag = 1; /* raised before the first step: stops after it */
      int rc = par_train_run(e, d, &to, &res);
      CHECK(rc == 0 && res.stopped && res.step == 1 && res.last_ckpt_step == 1,
            "run: rc %d stopped %d step %ld ckpt %ld: %s", rc, res.stopped, res.step,
            res.last_ckpt_step, par_engine_error(e));
      CHECK(access(ckpt, F_OK) == 0, "no checkpoint at the stop");
      flag = 0;
      par_data_destroy(d);
      par_engine_destroy(e);
    }

    /* 3. Divergence: SGD at lr 100 without clipping. */
    {
      par_engine_t *e = engine(100, "sgd");
      par_data_t *d = markov();
      par_train_options_t to = PAR_TRAIN_OPTIONS_DEFAULTS;
      to.steps = 100, to.ckpt_final = 0, to.diverge_factor = 4;
      par_train_result_t res;
      int rc = par_train_run(e, d, &to, &res);
      CHECK(rc == STRATA_EINVAL && res.diverged && res.step < 100, "rc %d diverged %d step %ld", rc,
            res.diverged, res.step);
      CHECK(strstr(par_engine_error(e), "the loss diverged at step") != NULL, "message '%s'",
            par_engine_error(e));
      CHECK(par_engine_initial_loss(e) > 5.0 && par_engine_initial_loss(e) < 6.0,
            "initial loss %g, want about ln 256", par_engine_initial_loss(e));
      par_data_destroy(d);
      par_engine_destroy(e);
    }
  }

  /* 4. A model that cannot fit the memory a rank has is refused before
   *    anything is allocated, naming the categories and a layout that fits:
   *    here a limit between the planner's bytes at ZeRO-0 and at ZeRO-3. */
  {
    par_gpt_config_t big = {.layers = 4, .hidden = 256, .heads = 4, .seq = 64, .vocab = 256};
    double need[4];
    for (int z = 0; z < 4; z++) {
      par_cluster_t cl;
      par_cluster_preset("this-machine", &cl, NULL, 0);
      cl.nodes = 1, cl.gpus_per_node = ranks, cl.gpu_mem_bytes = 1e18;
      par_layout_t lay = PAR_LAYOUT_DEFAULTS;
      lay.dp = ranks, lay.zero_stage = z, lay.microbatch = 2, lay.global_batch = 2 * ranks;
      par_plan_params_t pp;
      par_plan_params_engine(&pp); /* strata's GPT and engine */
      par_plan_t pl;
      CHECK(par_plan_estimate(&big, &lay, &cl, &pp, &pl) == 0, "planner: %s", pl.why);
      need[z] = pl.mem_total;
    }
    par_layout_t lay = PAR_LAYOUT_DEFAULTS;
    lay.dp = ranks, lay.microbatch = 2, lay.global_batch = 2 * ranks;
    par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
    par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
    eo.threads = 1, eo.memory_bytes = (need[0] + need[3]) / 2;
    par_engine_t *e = NULL;
    char err[1024] = "";
    int rc = par_engine_create(&e, &big, &lay, &oc, &eo, err, sizeof err);
    CHECK(rc == STRATA_ENOMEM && e == NULL, "create with %.0f bytes: rc %d", eo.memory_bytes, rc);
    CHECK(strstr(err, "memory: this model and layout need ") && strstr(err, "optimizer state") &&
              strstr(err, "a layout that fits: ZeRO stage "),
          "message: %s", err);
    if (rank == 0) printf("refused: %s\n", err);
    eo.memory_bytes = 1000; /* nothing fits */
    rc = par_engine_create(&e, &big, &lay, &oc, &eo, err, sizeof err);
    CHECK(rc == STRATA_ENOMEM && strstr(err, "a layout that fits: none on "), "message: %s", err);
    eo.memory_bytes = need[0] * 1.01; /* fits as it is */
    rc = par_engine_create(&e, &big, &lay, &oc, &eo, err, sizeof err);
    CHECK(rc == STRATA_OK, "refused with room: %s", err);
    par_engine_destroy(e);
  }

  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "engine_faults: cannot remove %s\n", dir);
  }
  int all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("engine_faults on %d ranks: %d failed checks\n", ranks, all);
  MPI_Finalize();
  return all ? 1 : 0;
}
