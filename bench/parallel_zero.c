/* Data parallelism and ZeRO through libparallel's engine, 2 or 4 ranks
 * (mpirun -np 2 or 4), one thread per rank:
 *
 *   BENCH parallel.dp2.scaling   tokens/s of dp = 2 over twice the tokens/s
 *                                of one rank training alone (one thread,
 *                                the same model and batch per rank), the
 *                                other rank idle meanwhile. Goal >= 0.9.
 *   BENCH parallel.zero3.vs_dp   tokens/s of ZeRO-3 over plain data
 *                                parallelism (ZeRO-0), dp = 2. Goal >= 0.85.
 *   BENCH parallel.plan.dp2.zeroN for N = 0..3: measured tokens/s over the
 *                                planner's, calibrated on the serial run.
 *   BENCH parallel.zeroN.mem     for N = 0..3: the accountant's peak bytes
 *                                per rank (model states, the pass's buffers,
 *                                activations) over the planner's prediction
 *                                for the same model and layout.
 *   BENCH parallel.zero3.bf16.vs_fp32 tokens/s of ZeRO-3 with bf16 parameters,
 *                                gradients and collectives over fp32 ZeRO-3
 *                                (on the CPU the conversions cost time; the
 *                                gain is memory and bytes on the wire).
 *   BENCH parallel.zero3.bf16.mem its peak bytes per rank over the planner's.
 *
 * With 4 ranks only the planner's figures print, as parallel.plan.dp4.zeroN
 * and parallel.dp4.zeroN.mem: on a 2-core machine two ranks share each core,
 * and the planner is told so (half a core's FLOP/s per rank, the socket's
 * memory bandwidth over the 4).
 *
 * Measurements alternate (serial, dp, ZeRO-1, -2, -3, serial, ...) and each
 * keeps its best, so a neighbour's burst on a shared machine hurts all alike.
 *
 *   bench_parallel_zero [STEPS] [REPEATS]   (defaults 20, 3) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <strata/parallel.h>

#include "bench_engine.h"

static int rank, ranks;
/* A step of about 0.1 s on one core: communication must hide behind it. */
static par_gpt_config_t mc = {.layers = 4, .hidden = 256, .heads = 4, .seq = 128, .vocab = 256};
enum { BATCH = 4 }; /* sequences per rank per step */

static par_engine_t *engine(MPI_Comm comm, int dp, int zero, par_precision_t prec) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = dp, lay.zero_stage = zero, lay.microbatch = BATCH, lay.global_batch = BATCH * dp;
  lay.precision = prec;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 1000, eo.threads = 1, eo.comm = comm;
  return bench_engine(&mc, &lay, &eo);
}

static par_data_t *data(void) { return bench_data(mc.seq); }

/* Tokens/s of `steps` steps over all ranks of comm (dp of them). */
static double run(par_engine_t *e, par_data_t *d, int steps, int dp) {
  return bench_run(e, d, steps, (double)BATCH * dp * mc.seq);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  bench_name = "bench_parallel_zero";
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != 2 && ranks != 4) {
    if (rank == 0) fprintf(stderr, "bench_parallel_zero: run with mpirun -np 2 or 4\n");
    MPI_Finalize();
    return 1;
  }
  const int nz = ranks == 2 ? 5 : 4; /* ZeRO 0-3, and at dp = 2 ZeRO-3 in bf16 */
  int steps = argc > 1 ? atoi(argv[1]) : 20, repeats = argc > 2 ? atoi(argv[2]) : 3;
  double serial = 0, best[5] = {0, 0, 0, 0, 0};
  size_t peak[5] = {0, 0, 0, 0, 0};
  par_engine_t *one = rank == 0 ? engine(MPI_COMM_SELF, 1, 0, PAR_PREC_FP32) : NULL, *z[5];
  par_data_t *d1 = data(), *dz[5];
  for (int s = 0; s < nz; s++)
    z[s] = engine(MPI_COMM_WORLD, ranks, s < 4 ? s : 3, s < 4 ? PAR_PREC_FP32 : PAR_PREC_BF16), dz[s] = data();
  for (int r = 0; r < repeats; r++) {
    if (rank == 0) {
      double t = run(one, d1, steps, 1);
      if (t > serial) serial = t;
    }
    bench_idle_until_done();
    for (int s = 0; s < nz; s++) {
      double t = run(z[s], dz[s], steps, ranks);
      if (t > best[s]) best[s] = t;
    }
  }
  for (int s = 0; s < nz; s++) {
    size_t cur = 0;
    par_engine_memory(z[s], &cur, &peak[s]);
  }
  const char *dp4 = ranks == 4 ? ".dp4" : ""; /* the names of the dp = 4 figures */
  if (rank == 0 && ranks == 2) {
    printf("BENCH parallel.dp2.scaling value=%.0f unit=tokens/s baseline=%.0f ratio=%.3f\n",
           best[0], 2 * serial, best[0] / (2 * serial));
    printf("BENCH parallel.zero3.vs_dp value=%.0f unit=tokens/s baseline=%.0f ratio=%.3f\n",
           best[3], best[0], best[3] / best[0]);
  }
  if (rank == 0) {
    par_cluster_t cl;
    par_cluster_preset("this-machine", &cl, NULL, 0);
    cl.nodes = 1, cl.gpus_per_node = 1;
    /* strata's GPT and engine: no attention scores kept, no dropout, no
     * reserved device memory; the gradient buckets are views of the
     * gradients (ZeRO-0, 1) or the pass's buffers (2, 3). */
    par_plan_params_t pp;
    par_plan_params_engine(&pp);
    /* The time model, calibrated on the serial run: the GEMM efficiency
     * that makes the planner's serial tokens/s the measured one (one thread
     * against the preset's two-thread peak), then its predictions for dp = 2
     * beside the measured runs, the two ranks sharing the socket's memory
     * bandwidth. */
    par_layout_t one = PAR_LAYOUT_DEFAULTS;
    one.microbatch = one.global_batch = BATCH;
    for (int it = 0; it < 30; it++) {
      par_plan_t pl;
      if (par_plan_estimate(&mc, &one, &cl, &pp, &pl)) break;
      pp.gemm_efficiency *= serial / pl.tokens_per_s;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double per_core = cores > 0 && ranks > cores ? (double)ranks / (double)cores : 1.0;
    cl.gpus_per_node = ranks, cl.gpu_mem_bw /= ranks;
    for (int k = 0; k < 3; k++) cl.peak_flops[k] /= per_core; /* ranks sharing a core */
    for (int s = 0; s < 4; s++) {
      par_layout_t lay = PAR_LAYOUT_DEFAULTS;
      lay.dp = ranks, lay.zero_stage = s, lay.microbatch = BATCH, lay.global_batch = ranks * BATCH;
      par_plan_t pl;
      if (par_plan_estimate(&mc, &lay, &cl, &pp, &pl) == 0)
        printf("BENCH parallel.plan.dp%d.zero%d value=%.0f unit=tokens/s baseline=%.0f ratio=%.3f\n", ranks, s,
               best[s], pl.tokens_per_s, best[s] / pl.tokens_per_s);
    }
    printf("bench_parallel_zero: the planner calibrated on the serial run (%.0f tokens/s): gemm_efficiency %.3f\n",
           serial, pp.gemm_efficiency);
    if (nz == 5)
      printf("BENCH parallel.zero3.bf16.vs_fp32 value=%.0f unit=tokens/s baseline=%.0f ratio=%.3f\n", best[4],
             best[3], best[4] / best[3]);
    for (int s = 0; s < nz; s++) {
      par_layout_t lay = PAR_LAYOUT_DEFAULTS;
      lay.dp = ranks, lay.zero_stage = s < 4 ? s : 3, lay.microbatch = BATCH, lay.global_batch = ranks * BATCH;
      lay.precision = s < 4 ? PAR_PREC_FP32 : PAR_PREC_BF16;
      par_plan_t pl;
      if (par_plan_estimate(&mc, &lay, &cl, &pp, &pl)) {
        fprintf(stderr, "bench_parallel_zero: planner: %s\n", pl.why);
        continue;
      }
      double plan = 0;
      for (int i = 0; i < PAR_MEM_COUNT; i++)
        plan += pl.mem[i];
      printf("BENCH parallel%s.zero%d%s.mem value=%.2f unit=MiB/rank baseline=%.2f ratio=%.3f\n", dp4,
             lay.zero_stage, s < 4 ? "" : ".bf16", (double)peak[s] / (1 << 20), plan / (1 << 20),
             (double)peak[s] / plan);
    }
    printf("bench_parallel_zero: GPT layers=%d hidden=%d seq=%d, %d ranks, %d sequences per rank, %d steps x "
           "%d; ZeRO-1 %.0f, ZeRO-2 %.0f tokens/s\n",
           mc.layers, mc.hidden, mc.seq, ranks, BATCH, steps, repeats, best[1], best[2]);
  }
  for (int s = 0; s < nz; s++)
    par_engine_destroy(z[s]), par_data_destroy(dz[s]);
  par_engine_destroy(one);
  par_data_destroy(d1);
  MPI_Finalize();
  return 0;
}
