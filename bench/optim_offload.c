/* BENCH optim.adamw.offload: the CPU update of ZeRO-Offload's static policy
 * as the engine runs it (layout.offload_optimizer = PAR_TIER_CPU): the fp32
 * masters and AdamW's moments in liboffload's host tier (one chunk per
 * array), the gradients and the bf16 parameters it writes in the same pass
 * outside it; in bytes/s against the same update over plainly allocated
 * arrays in the same run (the optim.adamw_bf16.cpu setting: 2 MiB-aligned,
 * huge pages asked for, each thread first touching the range it updates).
 * Goal >= 0.9: the tier's memory serves the optimizer as well as any.
 *
 *   bench_optim_offload [MiB-elements] [threads] [repeats]   (defaults 32, 2, 8) */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <strata/offload.h>
#include <strata/optim.h>

#include "optim_bench.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *big_alloc(size_t bytes) {
  size_t al = (size_t)2 << 20;
  void *p = aligned_alloc(al, (bytes + al - 1) / al * al);
  if (p) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

static void fill(float *a, size_t n, float v, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; i++) a[i] = v * (float)(1 + (i & 7));
}

int main(int argc, char **argv) {
  const size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 32) << 20;
  const int threads = argc > 2 ? atoi(argv[2]) : 2, reps = argc > 3 ? atoi(argv[3]) : 8;
  const bench_optim_kind *bk = bench_optim_kind_find("adamw_bf16");
  omp_set_dynamic(0);
  /* the plain arrays */
  float *p = big_alloc(n * 4), *g = big_alloc(n * 4), *m = big_alloc(n * 4), *v = big_alloc(n * 4);
  uint16_t *h = big_alloc(n * 2);
  /* the host tier's: masters, m, v (the engine's layout: zeroed chunks, then the masters written) */
  offload_config_t c = OFFLOAD_CONFIG_DEFAULTS;
  c.chunk_bytes = (n * 4 + 4095) / 4096 * 4096, c.budget[OFFLOAD_DEVICE] = 0, c.budget[OFFLOAD_HOST] = 3 * c.chunk_bytes;
  offload_t *off;
  char err[512];
  if (!p || !g || !m || !v || !h || offload_create(&off, &c, err, sizeof err)) {
    fprintf(stderr, "bench_optim_offload: out of memory or %s\n", err);
    return 1;
  }
  float *op[3];
  for (int k = 0, t; k < 3; k++)
    if (offload_tensor_add(off, n * 4, &t) || offload_access(off, t, OFFLOAD_HOST, (void **)&op[k])) {
      fprintf(stderr, "bench_optim_offload: %s\n", offload_error(off));
      return 1;
    }
  fill(p, n, 1e-3f, threads), fill(g, n, 1e-3f, threads), fill(m, n, 0, threads), fill(v, n, 0, threads);
  memset(h, 0, n * 2);
  fill(op[0], n, 1e-3f, threads);
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = bk->kind, cfg.threads = threads;
  optim *o = NULL;
  int id;
  if (optim_create(&o, &cfg, err, sizeof err) || optim_add_group(o, NULL, &id)) {
    fprintf(stderr, "bench_optim_offload: %s\n", err);
    return 1;
  }
  optim_tensor tp[8], to[8];
  bench_optim_tensors(tp, 8, p, g, m, v, h, n, id);
  bench_optim_tensors(to, 8, op[0], g, op[1], op[2], h, n, id);
  double best_p = 1e30, best_o = 1e30;
  for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
    double t0 = now();
    if (optim_step(o, tp, 8, 1.0f)) return 1;
    double t1 = now();
    if (optim_step(o, to, 8, 1.0f)) return 1;
    double t2 = now();
    if (r > 0) {
      if (t1 - t0 < best_p) best_p = t1 - t0;
      if (t2 - t1 < best_o) best_o = t2 - t1;
    }
  }
  double vp = bk->bytes * (double)n / best_p / 1e9, vo = bk->bytes * (double)n / best_o / 1e9;
  printf("BENCH optim.adamw.offload value=%.2f unit=GB/s baseline=%.2f ratio=%.3f\n", vo, vp, vo / vp);
  optim_destroy(o);
  offload_destroy(off);
  free(p), free(g), free(m), free(v), free(h);
  return 0;
}
