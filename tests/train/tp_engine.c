/* The engine with Megatron tensor parallelism (mpirun -np 2 and 4): tensor
 * groups of consecutive ranks, data parallelism (and ZeRO) across them.
 *  - Parallel equals serial: tp x dp in {2 x 1, 2 x 2, 4 x 1} with ZeRO 0,
 *    1 and 3, AdamW and LAMB (whose trust ratios need whole tensors: the
 *    slices' partial sums over the tensor group, replicated tensors once),
 *    clipping on: 20 steps give the serial losses, gradient norms and
 *    parameters (each rank's slice of the serial model).
 *  - Memory per rank equals the planner's: model states exactly,
 *    activations within 10%.
 *  - The same with Megatron's sequence parallelism (activations / tp).
 *  - Checkpoints hold every tensor whole: saved under tp 2 x dp 2 (ZeRO-1),
 *    loaded serially, under tp 1 x dp 4 (ZeRO-3) and under tp 4, each
 *    rank's parameters are exactly its slice of the saved model, and the
 *    runs go on.
 * Tolerance, as tests/train/zero_equiv.c argues for data parallelism, with
 * the tensor group's sums (row-parallel partial products, the inputs'
 * gradients, the norms' partial sums) as one more reordering of fp32 sums:
 * losses 1e-6 relative (seen 1e-7), gradient norms 1e-5, parameters 1e-4
 * of the training's move. A missing or doubled sum over the tensor group,
 * a replicated tensor counted t times in a norm or a misplaced slice moves
 * them by a sizeable part of it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/parallel.h>

#include "harness.h"

#define STEPS 20
static par_gpt_config_t mc = {.layers = 2, .hidden = 24, .heads = 4, .seq = 18, .vocab = 256};

static int seqpar; /* Megatron's sequence parallelism in the runs of equiv() */

static par_engine_t *engine(MPI_Comm comm, int tp, int dp, int zero, int B, const char *opt) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.tp = tp, lay.dp = dp, lay.zero_stage = zero, lay.microbatch = B, lay.global_batch = B * dp;
  lay.seq_parallel = seqpar && tp > 1;
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  oc.name = opt, oc.lr = 1e-2, oc.clip = 0.5, oc.warmup = 2, oc.weight_decay = 0.01;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = STEPS, eo.threads = 1, eo.seed = 5, eo.comm = comm, eo.bucket_mb = 0.004;
  return make_engine(&mc, &lay, &oc, &eo);
}

static par_data_t *data(void) { return markov_data(mc.seq); }

/* Memory per rank against the planner (memory_vs_planner). */
static void memory(par_engine_t *e, int tp, int dp, int zero, int B) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.tp = tp, lay.dp = dp, lay.zero_stage = zero, lay.microbatch = B, lay.global_batch = B * dp;
  lay.seq_parallel = seqpar;
  char what[64];
  snprintf(what, sizeof what, "tp %d%s x dp %d zero %d", tp, seqpar ? " seq-parallel" : "", dp, zero);
  memory_vs_planner(e, &mc, &lay, what);
}

static void equiv(int tp, int zero, const char *opt) {
  const int B = 2, dp = ranks / tp;
  size_t np = par_gpt_param_count(&mc);
  par_engine_t *s = engine(MPI_COMM_SELF, 1, 1, 0, B * dp, opt), *e = engine(MPI_COMM_WORLD, tp, dp, zero, B, opt);
  float *p0 = malloc(np * 4);
  par_data_t *ds = data(), *dd = data();
  double max_dl = 0, max_dg = 0;
  par_engine_get_params(s, p0);
  int tr = rank % tp;
  char what[96];
  snprintf(what, sizeof what, "tp %d zero %d %s", tp, zero, opt);
  if (!side_by_side(s, ds, e, dd, 3, what, &max_dl, &max_dg)) { /* the memory after 3 steps, then the rest */
    if (!strcmp(opt, "adamw")) memory(e, tp, dp, zero, B);
    side_by_side(s, ds, e, dd, STEPS - 3, what, &max_dl, &max_dg);
  }
  double rel = parts_apart(s, e, p0, tr);
  CHECK(max_dl <= 1e-6 && max_dg <= 1e-5 && rel <= 1e-4,
        "tp %d x dp %d zero %d %s: losses %.3g relative, norms %.3g, parameters %.3g of the move apart", tp, dp, zero,
        opt, max_dl, max_dg, rel);
  if (rank == 0)
    printf("tp %d%s x dp %d zero %d %-5s: losses within %.2g relative of one rank's, norms %.2g, parameters %.2g of "
           "the training's move\n",
           tp, seqpar ? " seq-parallel" : "", dp, zero, opt, max_dl, max_dg, rel);
  par_engine_destroy(e), par_engine_destroy(s);
  par_data_destroy(ds), par_data_destroy(dd);
  free(p0);
}

/* Saved under tp 2 x dp 2: every other layout holds its slice of it. */
static void reshard(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/tp.h5", dir);
  size_t np = par_gpt_param_count(&mc);
  par_engine_t *a = engine(MPI_COMM_WORLD, 2, ranks / 2, 1, 2, "adamw");
  par_data_t *d = data();
  par_step_t st;
  for (int k = 0; k < 5; k++) CHECK(par_engine_step(a, d, &st) == 0, "step: %s", par_engine_error(a));
  CHECK(par_engine_save(a, path, d, 5, NULL, 0) == 0, "save: %s", par_engine_error(a));
  size_t na = local_count(par_engine_model(a));
  float *saved = malloc(na * 4), *full = malloc(np * 4), *mine = malloc(np * 4), *want = malloc(np * 4);
  par_engine_get_params(a, saved);
  par_data_destroy(d);
  /* serially, on every rank: the whole model, whose tp-2 slice is what rank saved */
  par_engine_t *s = engine(MPI_COMM_SELF, 1, 1, 0, 2, "adamw");
  d = data();
  long step = 0;
  CHECK(par_engine_load(s, path, d, &step) == 0 && step == 5, "serial load: %s", par_engine_error(s));
  par_engine_get_params(s, full);
  slice_all(par_engine_model(a), par_engine_model(s), full, want, rank % 2);
  CHECK(!memcmp(want, saved, na * 4), "serial load: not the saved model");
  CHECK(par_engine_step(s, d, &st) == 0 && isfinite(st.loss), "a serial step after loading: %s", par_engine_error(s));
  par_data_destroy(d);
  /* tp 1 x dp 4 (ZeRO-3) and tp 4 x dp 1: their slices of the same model */
  int layouts[2][3] = {{1, ranks, 3}, {ranks, 1, 0}};
  for (int k = 0; k < 2; k++) {
    if (ranks == 2 && k == 1) continue; /* tp 2 is the saving layout */
    par_engine_t *b = engine(MPI_COMM_WORLD, layouts[k][0], layouts[k][1], layouts[k][2], 2, "adamw");
    char what[64];
    snprintf(what, sizeof what, "tp %d x dp %d", layouts[k][0], layouts[k][1]);
    d = data();
    check_loaded(b, d, path, par_engine_model(s), full, layouts[k][0], what);
    par_engine_destroy(b), par_data_destroy(d);
  }
  par_engine_destroy(s), par_engine_destroy(a);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    printf("np=%d: a checkpoint saved under tp 2 x dp %d loads serially, under tp 1 x dp %d (ZeRO-3)%s with every "
           "rank's slice exact\n",
           ranks, ranks / 2, ranks, ranks == 4 ? " and under tp 4" : "");
    unlink(path);
  }
  free(saved), free(full), free(mine), free(want);
}

int main(int argc, char **argv) {
  char dir[256];
  harness_start(&argc, &argv, "tp_engine", dir, sizeof dir);
  const char *opts[2] = {"adamw", "lamb"};
  for (int o = 0; o < 2; o++) {
    equiv(2, 0, opts[o]);
    if (ranks == 4) {
      equiv(2, 1, opts[o]);
      equiv(2, 3, opts[o]);
      equiv(4, 0, opts[o]);
    }
  }
  seqpar = 1; /* Megatron's sequence parallelism: the same results */
  for (int o = 0; o < 2; o++) {
    equiv(2, 0, opts[o]);
    if (ranks == 4) equiv(2, 1, opts[o]), equiv(4, 3, opts[o]);
  }
  seqpar = 0;
  reshard(dir);
  if (rank == 0) rmdir(dir);
  return harness_finish(NULL);
}
