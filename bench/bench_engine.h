/* What the engine benchmarks share: an engine and Markov data that end the
 * job with the reason when they cannot be made, timed steps, and a rank
 * that idles without taking a core while another measures alone.
 * bench_name prefixes the error lines. */
#ifndef STRATA_BENCH_ENGINE_H
#define STRATA_BENCH_ENGINE_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <strata/parallel.h>

static const char *bench_name = "bench";

/* MPI started and bench_name set; the program ends (status 1) unless it
 * runs on `need` ranks. */
static inline void bench_init(int *argc, char ***argv, const char *name, int need, int *rank) {
  int ranks;
  MPI_Init(argc, argv);
  bench_name = name;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != need) {
    if (*rank == 0) fprintf(stderr, "%s: run with mpirun -np %d\n", name, need);
    MPI_Finalize();
    exit(1);
  }
}

static inline par_engine_t *bench_engine(const par_gpt_config_t *mc, const par_layout_t *lay,
                                  const par_engine_options_t *eo) {
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  par_engine_t *e = NULL;
  char err[512];
  if (par_engine_create(&e, mc, lay, &oc, eo, err, sizeof err)) {
    fprintf(stderr, "%s: %s\n", bench_name, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return e;
}

/* The default Markov corpus of 2^20 tokens in samples of seq. */
static inline par_data_t *bench_data(int seq) {
  par_data_options_t o = PAR_DATA_DEFAULTS;
  o.seq = seq, o.markov_tokens = 1 << 20;
  par_data_t *d = NULL;
  char err[512];
  if (par_data_open(&o, &d, err, sizeof err)) {
    fprintf(stderr, "%s: %s\n", bench_name, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return d;
}

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Tokens/s of `steps` steps after one warm-up step, tokens_per_step each. */
static inline double bench_run(par_engine_t *e, par_data_t *d, int steps, double tokens_per_step) {
  par_step_t st;
  if (par_engine_step(e, d, &st)) goto fail;
  double t0 = bench_now();
  for (int i = 0; i < steps; i++)
    if (par_engine_step(e, d, &st)) goto fail;
  return steps * tokens_per_step / (bench_now() - t0);
fail:
  fprintf(stderr, "%s: %s\n", bench_name, par_engine_error(e));
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 0;
}

/* The other ranks wait without taking a core (MPI's blocking waits spin). */
static inline void bench_idle_until_done(void) {
  MPI_Request rq;
  MPI_Ibarrier(MPI_COMM_WORLD, &rq);
  for (int done = 0; !done;) {
    MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
    if (!done) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
}

#endif
