/* PatrickStar's chunk policy against ZeRO-Offload's static policy, on one
 * rank with the same budgets: a device of 64 MiB (on the CPU a cap on the
 * device's bytes standing in for a GPU) and a host tier of 256 MiB; bf16
 * GPT with h = 256, 4 heads, T = 64, recompute, 4 sequences a step, AdamW.
 *
 *   BENCH offload.maxmodel: the largest model (parameters; layers searched
 *   by bisection, a model counting as trainable when two steps run) with
 *   chunks over the static policy's. Goal >= 1.5 (PatrickStar's claim).
 *   BENCH offload.chunks.belady: on the chunk policy's largest model, the
 *   bytes an offline Belady schedule moves between device and host on the
 *   measured step's events (liboffload's offload_last_iteration: the same
 *   accesses and room, no pinning: a lower bound) over the bytes the
 *   manager moved in that step. Goal >= 0.9.
 *
 *   mpirun -np 1 bench_offload_chunks [device MiB] [host MiB]   (defaults 64, 256) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_engine.h"

static double device_mb = 64, host_mb = 256;

static par_gpt_config_t model(int layers) {
  return (par_gpt_config_t){.layers = layers, .hidden = 256, .heads = 4, .seq = 64, .vocab = 256, .recompute = 1};
}

/* Whether `layers` train two steps under the policy (chunks or static);
 * *tps their tokens/s (the second step's) and *info the engine's after them. */
static int fits(int chunks, int layers, double *tps, par_engine_info_t *info) {
  par_gpt_config_t mc = model(layers);
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.microbatch = 4, lay.global_batch = 4, lay.precision = PAR_PREC_BF16;
  lay.offload_optimizer = chunks ? PAR_TIER_DEVICE : PAR_TIER_CPU;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 3, eo.offload_chunks = chunks;
  eo.device_bytes = device_mb * 1048576.0, eo.host_bytes = host_mb * 1048576.0;
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  par_engine_t *e = NULL;
  char err[512];
  if (par_engine_create(&e, &mc, &lay, &oc, &eo, err, sizeof err)) return 0;
  par_data_t *d = bench_data(mc.seq);
  par_step_t st;
  int ok = par_engine_step(e, d, &st) == STRATA_OK;
  double t0 = bench_now();
  ok = ok && par_engine_step(e, d, &st) == STRATA_OK;
  *tps = 4.0 * mc.seq / (bench_now() - t0);
  par_engine_info(e, info);
  par_data_destroy(d);
  par_engine_destroy(e);
  return ok;
}

/* The most layers that fit (0: none), by bisection over [1, 128]. */
static int largest(int chunks, double *tps, par_engine_info_t *info) {
  int lo = 0, hi = 129;
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    double t;
    par_engine_info_t in;
    if (fits(chunks, mid, &t, &in)) lo = mid;
    else hi = mid;
  }
  if (lo > 0) fits(chunks, lo, tps, info);
  return lo;
}

int main(int argc, char **argv) {
  int rank;
  bench_init(&argc, &argv, "bench_offload_chunks", 1, &rank);
  if (argc > 1) device_mb = atof(argv[1]);
  if (argc > 2) host_mb = atof(argv[2]);
  double ts = 0, tc = 0;
  par_engine_info_t is, ic;
  int ls = largest(0, &ts, &is), lc = largest(1, &tc, &ic);
  if (!ls || !lc) {
    fprintf(stderr, "bench_offload_chunks: no model fits a device of %.0f MiB (static %d layers, chunks %d)\n",
            device_mb, ls, lc);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  par_gpt_config_t ms = model(ls), mcc = model(lc);
  double ps = (double)par_gpt_param_count(&ms), pc = (double)par_gpt_param_count(&mcc);
  printf("# device %.0f MiB, host %.0f MiB: static %d layers (%.1fM parameters, %.0f tokens/s, device peak %.1f MiB), "
         "chunks %d layers (%.1fM, %.0f tokens/s, device peak %.1f MiB, %zu chunks of %.2f MiB)\n",
         device_mb, host_mb, ls, ps / 1e6, ts, is.device_peak / 1048576.0, lc, pc / 1e6, tc,
         ic.device_peak / 1048576.0, ic.chunks, ic.chunk_bytes / 1048576.0);
  printf("BENCH offload.maxmodel value=%.0f unit=params baseline=%.0f ratio=%.3f\n", pc, ps, pc / ps);
  printf("BENCH offload.chunks.belady value=%.0f unit=bytes baseline=%.0f ratio=%.3f\n", (double)ic.last_optimal,
         (double)ic.last_moved, ic.last_moved ? (double)ic.last_optimal / (double)ic.last_moved : 0.0);
  MPI_Finalize();
  return 0;
}
