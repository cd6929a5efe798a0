/* Sequence parallelism by ring self-attention in the engine against the
 * serial run (mpirun -np 2 and 4): sp = ranks (and on 4 ranks also sp = 2
 * x dp = 2, and sp = 2 x Megatron's tp = 2, each tensor rank's ring
 * carrying its heads), ZeRO stages 0 and 1, AdamW with clipping: 10 steps give the
 * losses, gradient norms and parameters of one rank training the whole
 * global batch alone on whole sequences, and the same validation loss.
 * Per step, the sequence group's libcomm counters equal the ring's bytes:
 * per block and microbatch (sp - 1) 2 X in the forward and (4 sp - 2) X in
 * the backward, X = B (T / sp) h / tp floats (with recompute the forward again
 * for every block but the last), and the planner's (which recomputes the
 * last block too); the rank's memory is within 10% of the planner's (as
 * tests/train/zero_equiv.c: the activations' modelling).
 *
 * Tolerance: as tests/train/zero_equiv.c (the ranks' gradients summed in
 * another order than the serial GEMMs: losses 1e-6 relative, norms 1e-5,
 * parameters 1e-4 of the move), the attention's online softmax adding a
 * few ulp per key block (tests/gpt/ring_equiv.c: 5e-7 on O(1) values),
 * well inside those bounds; a wrong position row, a block missed or a
 * gradient not averaged over the sequence group moves them by O(1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strata/parallel.h>

#include "harness.h"

#define STEPS 10
static par_gpt_config_t mc = {.layers = 2, .hidden = 24, .heads = 4, .seq = 32, .vocab = 256};

static par_engine_t *engine(MPI_Comm comm, int dp, int sp, int tp, int zero, int micro) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = dp, lay.sp = sp, lay.tp = tp, lay.zero_stage = zero, lay.microbatch = micro, lay.global_batch = micro * dp;
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  oc.lr = 1e-2, oc.clip = 0.5, oc.warmup = 2, oc.weight_decay = 0.01;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = STEPS, eo.threads = 1, eo.seed = 5, eo.comm = comm;
  return make_engine(&mc, &lay, &oc, &eo);
}

static void run(int sp, int tp, int zero, int recompute) {
  const int B = 2, dp = ranks / (sp * tp);
  mc.recompute = recompute;
  par_engine_t *s = engine(MPI_COMM_SELF, 1, 1, 1, 0, B * dp), *e = engine(MPI_COMM_WORLD, dp, sp, tp, zero, B);
  par_data_t *ds = markov_data(mc.seq), *de = markov_data(mc.seq);
  size_t n = par_gpt_param_count(&mc);
  float *p0 = malloc(n * 4), *ps = malloc(n * 4), *pe = malloc(n * 4);
  par_engine_get_params(s, p0);
  double max_dl = 0, max_dg = 0;
  comm_t *ring = par_engine_group(e, "sp");
  double last_bytes = 0;
  for (int step = 1; step <= STEPS; step++) {
    par_step_t a, b;
    comm_counter_t c0, c1;
    comm_counters(ring, COMM_K_SEND, &c0);
    CHECK(par_engine_step(s, ds, &a) == 0 && par_engine_step(e, de, &b) == 0, "step %d: %s / %s", step,
          par_engine_error(s), par_engine_error(e));
    comm_counters(ring, COMM_K_SEND, &c1);
    double dl = fabs(a.loss - b.loss) / fabs(a.loss), dg = fabs(a.grad_norm - b.grad_norm) / a.grad_norm;
    if (dl > max_dl) max_dl = dl;
    if (dg > max_dg) max_dg = dg;
    double X = (double)B * (mc.seq / sp) * (mc.hidden / tp) * 4;
    /* forwards: each block's, and with recompute again each but the last (whose activations are still
     * there when backward starts) */
    double forwards = mc.layers + (recompute ? mc.layers - 1 : 0);
    double want = forwards * (sp - 1) * 2 * X + mc.layers * (4.0 * sp - 2) * X;
    last_bytes = (double)(c1.bytes_sent - c0.bytes_sent);
    if (recompute) last_bytes += (sp - 1) * 2 * X; /* (the planner recomputes the last block too) */
    CHECK((double)(c1.bytes_sent - c0.bytes_sent) == want, "step %d: the ring sent %llu bytes, its formula %.0f", step,
          (unsigned long long)(c1.bytes_sent - c0.bytes_sent), want);
  }
  /* the planner's ring traffic for this model and layout: the same bytes */
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = dp, lay.sp = sp, lay.tp = tp, lay.zero_stage = zero, lay.microbatch = B, lay.global_batch = B * dp;
  par_cluster_t cl;
  par_plan_params_t pp;
  par_plan_t pl;
  par_cluster_preset("this-machine", &cl, NULL, 0);
  cl.gpus_per_node = ranks;
  par_plan_params_engine(&pp);
  CHECK(par_plan_estimate(&mc, &lay, &cl, &pp, &pl) == 0 && pl.comm_bytes[PAR_T_SP] == last_bytes,
        "sp %d: the planner's ring bytes %.0f, the ring's %.0f", sp, pl.comm_bytes[PAR_T_SP], last_bytes);
  size_t peak = 0;
  par_engine_memory(e, NULL, &peak);
  double predicted = 0;
  for (int i = 0; i < PAR_MEM_COUNT; i++) predicted += pl.mem[i];
  CHECK(fabs(peak / predicted - 1) <= 0.1, "sp %d: %zu bytes at most on this rank, the planner's %.0f", sp, peak,
        predicted);
  CHECK(max_dl <= 1e-6 && max_dg <= 1e-5, "sp %d ZeRO-%d: losses differ by %.2g, norms by %.2g", sp, zero, max_dl,
        max_dg);
  par_engine_get_params(s, ps), par_engine_get_params(e, pe);
  if (tp > 1) { /* this tensor rank's slices of the serial run's */
    size_t nl = local_count(par_engine_model(e));
    float *a = malloc(nl * 4), *b = malloc(nl * 4);
    slice_all(par_engine_model(e), par_engine_model(s), ps, a, rank % tp);
    slice_all(par_engine_model(e), par_engine_model(s), p0, b, rank % tp);
    memcpy(ps, a, nl * 4), memcpy(p0, b, nl * 4);
    n = nl;
    free(a), free(b);
  }
  double sums[2] = {0, 0};
  move_sums(ps, pe, p0, n, sums);
  double rel = sqrt(sums[0] / sums[1]);
  CHECK(rel <= 1e-4, "sp %d ZeRO-%d: parameters %.2g of the move from the serial run's", sp, zero, rel);
  double vs = 0, ve = 0;
  /* the same 4 dp validation sequences: 4 batches of B, or 4 / dp of the serial run's B dp */
  CHECK(par_engine_evaluate(s, ds, 4 / dp, &vs) == 0 && par_engine_evaluate(e, de, 4, &ve) == 0, "evaluate: %s",
        par_engine_error(e));
  CHECK(fabs(vs - ve) <= 1e-6 * fabs(vs), "sp %d: validation loss %.9g, serial %.9g", sp, ve, vs);
  if (rank == 0)
    printf("sp %d x tp %d x dp %d ZeRO-%d%s: the serial run's losses (%.1g), norms (%.1g), parameters (%.1g of the move) and "
           "validation loss; the ring's bytes and the planner's; memory %.3f of the planner's\n",
           sp, tp, dp, zero, recompute ? " recompute" : "", max_dl, max_dg, rel, peak / predicted);
  free(p0), free(ps), free(pe);
  par_data_destroy(ds), par_data_destroy(de);
  par_engine_destroy(s), par_engine_destroy(e);
}

int main(int argc, char **argv) {
  char tmp[256];
  harness_start(&argc, &argv, "sp_engine", tmp, sizeof tmp);
  run(ranks, 1, 0, 0);
  run(ranks, 1, 1, 1);
  if (ranks == 4) run(2, 1, 1, 0), run(2, 2, 1, 0), run(2, 2, 0, 1);
  if (rank == 0) rmdir(tmp);
  return harness_finish(NULL);
}
