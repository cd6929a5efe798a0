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

#include "bench_engine.h"

static par_gpt_config_t mc = {.layers = 4, .hidden = 512, .heads = 8, .seq = 128, .vocab = 256};
enum { BATCH = 4 };

static par_engine_t *engine(MPI_Comm comm, int tp) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.tp = tp, lay.dp = 1, lay.microbatch = BATCH, lay.global_batch = BATCH;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 1000, eo.threads = 1, eo.comm = comm;
  return bench_engine(&mc, &lay, &eo);
}

int main(int argc, char **argv) {
  int rank;
  bench_init(&argc, &argv, "bench_parallel_tp", 2, &rank);
  int steps = argc > 1 ? atoi(argv[1]) : 10, repeats = argc > 2 ? atoi(argv[2]) : 3;
  double serial = 0, tp = 0;
  par_engine_t *one = rank == 0 ? engine(MPI_COMM_SELF, 1) : NULL, *two = engine(MPI_COMM_WORLD, 2);
  par_data_t *d1 = bench_data(mc.seq), *d2 = bench_data(mc.seq);
  for (int r = 0; r < repeats; r++) {
    if (rank == 0) {
      double t = bench_run(one, d1, steps, (double)BATCH * mc.seq);
      if (t > serial) serial = t;
    }
    bench_idle_until_done();
    double t = bench_run(two, d2, steps, (double)BATCH * mc.seq);
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
