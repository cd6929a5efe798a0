/* Megatron tensor parallelism through libparallel's engine, 2 ranks
 * (mpirun -np 2), one thread per rank:
 *
 *   BENCH parallel.tp2.scaling   tokens/s with tp = 2 over twice the
 *                                tokens/s of one rank training alone (one
 *                                thread, the same model and batch), the
 *                                other rank idle meanwhile; on a model wide
 *                                enough that the GEMMs dominate (h = 512).
 *                                Goal >= 0.8.
 *
 * Each rank computes half of every block's GEMMs and the group allreduces
 * the (B, T, h) activations four times per block and step: the figure is
 * what those sums and the replicated layernorms cost. Measurements
 * alternate (serial, tp, serial, ...) and each keeps its best.
 *
 *   bench_parallel_tp [STEPS] [REPEATS]   (defaults 10, 3) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <strata/parallel.h>

static par_gpt_config_t mc = {.layers = 4, .hidden = 512, .heads = 8, .seq = 128, .vocab = 256};
enum { BATCH = 4 };

static par_engine_t *engine(MPI_Comm comm, int tp) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.tp = tp, lay.dp = 1, lay.microbatch = BATCH, lay.global_batch = BATCH;
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 1000, eo.threads = 1, eo.comm = comm;
  par_engine_t *e = NULL;
  char err[512];
  if (par_engine_create(&e, &mc, &lay, &oc, &eo, err, sizeof err)) {
    fprintf(stderr, "bench_parallel_tp: %s\n", err);
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
    fprintf(stderr, "bench_parallel_tp: %s\n", err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return d;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Tokens/s of `steps` steps after one warm-up step. */
static double run(par_engine_t *e, par_data_t *d, int steps) {
  par_step_t st;
  if (par_engine_step(e, d, &st)) goto fail;
  double t0 = now();
  for (int i = 0; i < steps; i++)
    if (par_engine_step(e, d, &st)) goto fail;
  return (double)steps * BATCH * mc.seq / (now() - t0);
fail:
  fprintf(stderr, "bench_parallel_tp: %s\n", par_engine_error(e));
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
  int rank, ranks;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != 2) {
    if (rank == 0) fprintf(stderr, "bench_parallel_tp: run with mpirun -np 2\n");
    MPI_Finalize();
    return 1;
  }
  int steps = argc > 1 ? atoi(argv[1]) : 10, repeats = argc > 2 ? atoi(argv[2]) : 3;
  double serial = 0, tp = 0;
  par_engine_t *one = rank == 0 ? engine(MPI_COMM_SELF, 1) : NULL, *two = engine(MPI_COMM_WORLD, 2);
  par_data_t *d1 = data(), *d2 = data();
  for (int r = 0; r < repeats; r++) {
    if (rank == 0) {
      double t = run(one, d1, steps);
      if (t > serial) serial = t;
    }
    idle_until_done();
    double t = run(two, d2, steps);
    if (t > tp) tp = t;
  }
  if (rank == 0) {
    printf("BENCH parallel.tp2.scaling value=%.0f unit=tokens/s baseline=%.0f ratio=%.3f\n", tp, 2 * serial,
           tp / (2 * serial));
    printf("bench_parallel_tp: GPT layers=%d hidden=%d heads=%d seq=%d, %d sequences per step, %d steps x %d; "
           "serial %.0f tokens/s\n",
           mc.layers, mc.hidden, mc.heads, mc.seq, BATCH, steps, repeats, serial);
  }
  par_engine_destroy(two), par_engine_destroy(one);
  par_data_destroy(d1), par_data_destroy(d2);
  MPI_Finalize();
  return 0;
}
