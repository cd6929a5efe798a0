/* Pipeline parallelism through libparallel's engine, 2 ranks (mpirun -np
 * 2), one thread per rank:
 *
 *   BENCH parallel.pp.efficiency   tokens/s with pp = 2, 1F1B, m = 8
 *                                  microbatches, over the ideal pipeline:
 *                                  twice the tokens/s of one rank training
 *                                  the whole model alone (one thread, the
 *                                  same microbatches, the other rank idle)
 *                                  times m / (m + p - 1), the schedule's
 *                                  share of busy slots. Goal >= 0.9.
 *
 * Each stage computes half of the blocks (the first also the embedding, the
 * last the head and loss) and sends b s h activations and gradients per
 * microbatch across the boundary; the figure is what the sends, the
 * stages' imbalance and the waits beyond the schedule's own bubble cost.
 * The second line gives the share of the step the stages spent outside
 * their forwards and backwards (1 - par_step_t.pipe_busy_s / seconds)
 * beside the schedule's bubble (p - 1) / (m + p - 1). Measurements
 * alternate (serial, pipeline, ...) and each keeps its best.
 *
 *   bench_parallel_pp [STEPS] [REPEATS]   (defaults 4, 2) */
#include <stdio.h>
#include <stdlib.h>

#include <strata/parallel.h>

#include "bench_engine.h"

static par_gpt_config_t mc = {.layers = 8, .hidden = 256, .heads = 8, .seq = 128, .vocab = 256};
enum { BATCH = 4, M = 8 };

static par_engine_t *engine(MPI_Comm comm, int pp) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.pp = pp, lay.dp = 1, lay.microbatch = BATCH, lay.global_batch = BATCH * M, lay.schedule = PAR_SCHED_1F1B;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 1000, eo.threads = 1, eo.comm = comm;
  return bench_engine(&mc, &lay, &eo);
}

int main(int argc, char **argv) {
  int rank;
  bench_init(&argc, &argv, "bench_parallel_pp", 2, &rank);
  int steps = argc > 1 ? atoi(argv[1]) : 4, repeats = argc > 2 ? atoi(argv[2]) : 2;
  double serial = 0, pp = 0, tokens = (double)BATCH * M * mc.seq, wait = 0, step_s = 0;
  par_engine_t *one = rank == 0 ? engine(MPI_COMM_SELF, 1) : NULL, *two = engine(MPI_COMM_WORLD, 2);
  par_data_t *d1 = bench_data(mc.seq), *d2 = bench_data(mc.seq);
  for (int r = 0; r < repeats; r++) {
    if (rank == 0) {
      double t = bench_run(one, d1, steps, tokens);
      if (t > serial) serial = t;
    }
    bench_idle_until_done();
    double t = bench_run(two, d2, steps, tokens);
    if (t > pp) {
      pp = t;
      par_step_t st; /* one more step: its waits */
      if (par_engine_step(two, d2, &st)) {
        fprintf(stderr, "bench_parallel_pp: %s\n", par_engine_error(two));
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      double w[2] = {st.seconds - st.pipe_busy_s, st.seconds};
      MPI_Allreduce(MPI_IN_PLACE, w, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      wait = w[0] / 2, step_s = w[1] / 2;
    }
  }
  if (rank == 0) {
    double ideal = 2 * serial * M / (M + 1.0);
    printf("BENCH parallel.pp.efficiency value=%.0f unit=tokens/s baseline=%.0f ratio=%.3f\n", pp, ideal, pp / ideal);
    printf("bench_parallel_pp: GPT layers=%d hidden=%d heads=%d seq=%d, 1F1B over 2 stages, %d microbatches of %d; "
           "serial %.0f tokens/s; idle %.1f%% of the step (the schedule's bubble %.1f%%)\n",
           mc.layers, mc.hidden, mc.heads, mc.seq, M, BATCH, serial, 100 * wait / step_s, 100.0 / (M + 1));
  }
  par_engine_destroy(two), par_engine_destroy(one);
  par_data_destroy(d1), par_data_destroy(d2);
  MPI_Finalize();
  return 0;
}
