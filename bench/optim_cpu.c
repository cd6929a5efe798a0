/* BENCH optim.<kind>.cpu: liboptim's fused CPU update of 64 Mi fp32
 * parameters on 2 threads, as memory bandwidth (bytes read and written per
 * step / time), against a triad a = b + s c moving the same number of bytes
 * in the same run, on the same threads, with the same first-touch layout
 * (each thread touches first the contiguous range it later updates).
 *
 * Bytes per element per step, counted as STREAM does (no write-allocate):
 *   adamw       read p g m v, write p m v             7 x 4 = 28
 *   adamw_bf16  the same plus a bf16 copy of p         28 + 2 = 30
 *   lamb        phase one reads p g m v, writes m v;   10 x 4 = 40
 *               phase two reads p m v, writes p
 * Why the ratio can exceed 1: the triad's store to a[] first reads each
 * line of a[] (write-allocate), 4 bytes moved per element that STREAM's
 * count leaves out (16 moved, 12 counted), whereas the optimizer writes back
 * only lines it has just read (p, m, v), so all its traffic is counted. On
 * this kind of machine an in-place a += s c (12 bytes counted, no
 * write-allocate) runs ~1.3-1.6x faster than the triad; that, not the
 * triad, is the ceiling for an in-place update.
 * Usage: optim_cpu KIND [MiB-elements] [threads] [repeats]
 * Prints one line: BENCH optim.KIND.cpu value=GB/s unit=GB/s baseline=triad
 * GB/s ratio=value/baseline. Best of the repeats for both, interleaved. */
#define _GNU_SOURCE
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <strata/optim.h>

#include "optim_bench.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* 2 MiB-aligned, transparent huge pages requested (for both contenders). */
static void *big_alloc(size_t bytes) {
  size_t al = (size_t)2 << 20;
  void *p = aligned_alloc(al, (bytes + al - 1) / al * al);
  if (p) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

/* liboptim's partition (cpu.c): thread t of T owns [n t / T, n (t+1) / T)
 * rounded down to 16 elements. */
static void range_of(size_t n, int t, int T, size_t *lo, size_t *hi) {
  *lo = (size_t)((double)n * t / T) & ~(size_t)15;
  *hi = t == T - 1 ? n : (size_t)((double)n * (t + 1) / T) & ~(size_t)15;
}

/* First touch: each thread writes the range it will own. */
static void first_touch(float *const *arr, int narr, size_t n, int threads, float val) {
#pragma omp parallel num_threads(threads)
  {
    size_t lo, hi;
    range_of(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
    for (int a = 0; a < narr; a++)
      for (size_t i = lo; i < hi; i++)
        arr[a][i] = val * (float)(1 + (i & 7));
  }
}

static void triad(float *restrict a, const float *restrict b, const float *restrict c, float s,
                  size_t n, int threads) {
#pragma omp parallel num_threads(threads)
  {
    size_t lo, hi;
    range_of(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
    for (size_t i = lo; i < hi; i++)
      a[i] = b[i] + s * c[i];
  }
}

int main(int argc, char **argv) {
  const char *kind = argc > 1 ? argv[1] : "adamw";
  const size_t n = (size_t)(argc > 2 ? atol(argv[2]) : 64) << 20;
  const int threads = argc > 3 ? atoi(argv[3]) : 2;
  const int reps = argc > 4 ? atoi(argv[4]) : 10;
  const int ntensors = 8; /* a few tensors: the multi-tensor path */
  const bench_optim_kind *bk = bench_optim_kind_find(kind);
  if (!bk) {
    fprintf(stderr, "optim_cpu: unknown kind '%s' (" BENCH_OPTIM_KIND_NAMES ")\n", kind);
    return 2;
  }
  const int okind = bk->kind, lowp = bk->lowp;
  const double bpe = bk->bytes; /* bytes per element per step */
  omp_set_dynamic(0);

  /* the optimizer's arrays */
  float *p = big_alloc(n * 4), *g = big_alloc(n * 4), *m = big_alloc(n * 4), *v = big_alloc(n * 4);
  uint16_t *h = lowp ? big_alloc(n * 2) : NULL;
  /* the triad's: three arrays of bytes_per_step / 12 elements */
  const size_t nt = (size_t)(bpe * (double)n / 12.0) & ~(size_t)15;
  float *ta = big_alloc(nt * 4), *tb = big_alloc(nt * 4), *tc = big_alloc(nt * 4);
  if (!p || !g || !m || !v || (lowp && !h) || !ta || !tb || !tc) {
    fprintf(stderr, "optim_cpu: out of memory for %zu + %zu elements\n", 4 * n, 3 * nt);
    return 1;
  }
  float *oarr[4] = {p, g, m, v};
  first_touch(oarr, 4, n, threads, 1e-3f);
  if (h) {
#pragma omp parallel num_threads(threads)
    {
      size_t lo, hi;
      range_of(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
      memset(h + lo, 0, (hi - lo) * 2);
    }
  }
  float *tarr[3] = {ta, tb, tc};
  first_touch(tarr, 3, nt, threads, 1.0f);

  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = okind;
  cfg.threads = threads;
  optim *o = NULL;
  char err[256];
  int id;
  if (optim_create(&o, &cfg, err, sizeof err) || optim_add_group(o, NULL, &id)) {
    fprintf(stderr, "optim_cpu: %s %s\n", err, optim_last_error(o));
    return 1;
  }
  optim_tensor t[8];
  bench_optim_tensors(t, ntensors, p, g, m, v, h, n, id);

  double best_o = 1e30, best_t = 1e30;
  for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
    double t0 = now();
    if (optim_step(o, t, ntensors, 1.0f)) {
      fprintf(stderr, "optim_cpu: %s\n", optim_last_error(o));
      return 1;
    }
    double t1 = now();
    triad(ta, tb, tc, 0.5f, nt, threads);
    double t2 = now();
    if (r > 0) {
      if (t1 - t0 < best_o) best_o = t1 - t0;
      if (t2 - t1 < best_t) best_t = t2 - t1;
    }
  }
  const double vo = bpe * (double)n / best_o / 1e9, vt = 12.0 * (double)nt / best_t / 1e9;
  printf("BENCH optim.%s.cpu value=%.2f unit=GB/s baseline=%.2f ratio=%.3f\n", kind, vo, vt,
         vo / vt);
  optim_destroy(o);
  free(p);
  free(g);
  free(m);
  free(v);
  free(h);
  free(ta);
  free(tb);
  free(tc);
  return 0;
}
