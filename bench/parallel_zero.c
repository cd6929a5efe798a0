/* Data parallelism and ZeRO through libparallel's engine, 2 ranks (mpirun -np 2),
 * one thread per rank:
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

#include <strata/parallel.h>

static int rank, ranks;
/* A step of about 0.1 s on one core: communication must hide behind it. */
static par_gpt_config_t mc = {.layers = 4, .hidden = 256, .heads = 4, .seq = 128, .vocab = 256};
enum { BATCH = 4 }; /* sequences per rank per step */

static par_engine_t *engine(MPI_Comm comm, int dp, int zero) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = dp, lay.zero_stage = zero, lay.microbatch = BATCH, lay.global_batch = BATCH * dp;
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 1000, eo.threads = 1, eo.comm = comm;
  par_engine_t *e = NULL;
  char err[512];
  if (par_engine_create(&e, &mc, &lay, &oc, &eo, err, sizeof err)) {
    fprintf(stderr, "bench_parallel_zero: %s\n", err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return e;
}

static par_data_t *data(void) {
  par_data_options_t o = PAR_DATA_DEFAULTS;
  o.seq = mc.seq, o.markov_tokens = 1 << 20;
  par_data_t *d = NULL;
  char err[512];
  if (par_data_open(&o, &d, err, sizeof err)) {
    fprintf(stderr, "bench_parallel_zero: %s\n", err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return d;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Tokens/s of `steps` steps (after one warm-up step) over all ranks of comm. */
static double run(par_engine_t *e, par_data_t *d, int steps, int dp) {
  par_step_t st;
  if (par_engine_step(e, d, &st)) goto fail;
  double t0 = now();
  for (int i = 0; i < steps; i++)
    if (par_engine_step(e, d, &st)) goto fail;
  return (double)steps * BATCH * dp * mc.seq / (now() - t0);
fail:
  fprintf(stderr, "bench_parallel_zero: %s\n", par_engine_error(e));
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 0;
}

/* The other rank waits without taking a core (MPI's blocking waits spin). */
static void idle_until_done(void) {
  MPI_Request rq;
  MPI_Ibarrier(MPI_COMM_WORLD, &rq);
  for (int done = 0; !done;) {
    MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
    if (!done) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != 2) {
    if (rank == 0) fprintf(stderr, "bench_parallel_zero: run with mpirun -np 2\n");
    MPI_Finalize();
    return 1;
  }
  int steps = argc > 1 ? atoi(argv[1]) : 20, repeats = argc > 2 ? atoi(argv[2]) : 3;
  double serial = 0, best[4] = {0, 0, 0, 0};
  size_t peak[4] = {0, 0, 0, 0};
  par_engine_t *one = rank == 0 ? engine(MPI_COMM_SELF, 1, 0) : NULL, *z[4];
  par_data_t *d1 = data(), *dz[4];
  for (int s = 0; s < 4; s++)
    z[s] = engine(MPI_COMM_WORLD, 2, s), dz[s] = data();
  for (int r = 0; r < repeats; r++) {
    if (rank == 0) {
      double t = run(one, d1, steps, 1);
      if (t > serial) serial = t;
    }
    idle_until_done();
    for (int s = 0; s < 4; s++) {
      double t = run(z[s], dz[s], steps, 2);
      if (t > best[s]) best[s] = t;
    }
  }
  for (int s = 0; s < 4; s++) {
    size_t cur = 0;
    par_engine_memory(z[s], &cur, &peak[s]);
  }
  if (rank == 0) {
    printf("BENCH parallel.dp2.scaling value=%.0f unit=tokens/s baseline=%.0f ratio=%.3f\n",
           best[0], 2 * serial, best[0] / (2 * serial));
    printf("BENCH parallel.zero3.vs_dp value=%.0f unit=tokens/s baseline=%.0f ratio=%.3f\n",
           best[3], best[0], best[3] / best[0]);
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
    cl.gpus_per_node = 2, cl.gpu_mem_bw /= 2;
    for (int s = 0; s < 4; s++) {
      par_layout_t lay = PAR_LAYOUT_DEFAULTS;
      lay.dp = 2, lay.zero_stage = s, lay.microbatch = BATCH, lay.global_batch = 2 * BATCH;
      par_plan_t pl;
      if (par_plan_estimate(&mc, &lay, &cl, &pp, &pl) == 0)
        printf("BENCH parallel.plan.dp2.zero%d value=%.0f unit=tokens/s baseline=%.0f ratio=%.3f\n", s, best[s],
               pl.tokens_per_s, best[s] / pl.tokens_per_s);
    }
    printf("bench_parallel_zero: the planner calibrated on the serial run (%.0f tokens/s): gemm_efficiency %.3f\n",
           serial, pp.gemm_efficiency);
    for (int s = 0; s < 4; s++) {
      par_layout_t lay = PAR_LAYOUT_DEFAULTS;
      lay.dp = 2, lay.zero_stage = s, lay.microbatch = BATCH, lay.global_batch = 2 * BATCH;
      par_plan_t pl;
      if (par_plan_estimate(&mc, &lay, &cl, &pp, &pl)) {
        fprintf(stderr, "bench_parallel_zero: planner: %s\n", pl.why);
        continue;
      }
      double plan = 0;
      for (int i = 0; i < PAR_MEM_COUNT; i++)
        plan += pl.mem[i];
      printf("BENCH parallel.zero%d.mem value=%.2f unit=MiB/rank baseline=%.2f ratio=%.3f\n", s,
             (double)peak[s] / (1 << 20), plan / (1 << 20), (double)peak[s] / plan);
    }
    printf("bench_parallel_zero: GPT layers=%d hidden=%d seq=%d, %d sequences per rank, %d steps x "
           "%d; ZeRO-1 %.0f, "
           "ZeRO-2 %.0f tokens/s\n",
           mc.layers, mc.hidden, mc.seq, BATCH, steps, repeats, best[1], best[2]);
  }
  for (int s = 0; s < 4; s++)
    par_engine_destroy(z[s]), par_data_destroy(dz[s]);
  par_engine_destroy(one);
  par_data_destroy(d1);
  MPI_Finalize();
  return 0;
}
