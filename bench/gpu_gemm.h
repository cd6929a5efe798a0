/* The GPU benchmarks' baseline: a cuBLAS bf16 GEMM 8192^3 with f32
 * accumulation and output, through libtensor, in FLOP/s (median of 5 rounds of
 * 10), measured in the same run as the figure it divides. 0 on failure (the
 * reason goes to stderr). */
#ifndef STRATA_BENCH_GPU_GEMM_H
#define STRATA_BENCH_GPU_GEMM_H

#include <stdio.h>
#include <stdlib.h>
#include <strata/tensor.h>
#include <time.h>

static double gpu_gemm_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int gpu_gemm_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double gpu_gemm_peak(int device) {
  tensor_ctx_t *tc = NULL;
  tensor_t a = {0}, b = {0}, c = {0};
  double flops = 0;
  int64_t n = 8192, s[2] = {n, n};
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.device = device;
  if (tensor_ctx_create(&tc, &o) || tensor_alloc(tc, &a, TENSOR_BF16, device, 2, s) ||
      tensor_alloc(tc, &b, TENSOR_BF16, device, 2, s) ||
      tensor_alloc(tc, &c, TENSOR_F32, device, 2, s))
    goto done;
  tensor_fill(tc, &a, 0.01f), tensor_fill(tc, &b, 0.02f);
  double t[5];
  if (tensor_matmul(tc, &c, &a, &b, 0, 0, 1.f, 0.f) || tensor_synchronize(tc)) goto done;
  for (int r = 0; r < 5; r++) {
    double t0 = gpu_gemm_now();
    for (int k = 0; k < 10; k++)
      if (tensor_matmul(tc, &c, &a, &b, 0, 0, 1.f, 0.f)) goto done;
    if (tensor_synchronize(tc)) goto done; /* the GEMMs are asynchronous: time them finished */
    t[r] = (gpu_gemm_now() - t0) / 10;
  }
  qsort(t, 5, sizeof *t, gpu_gemm_cmp);
  flops = 2.0 * n * n * n / t[2];
done:
  if (tc && flops == 0) fprintf(stderr, "gpu gemm: %s\n", tensor_last_error(tc));
  tensor_free(tc, &a), tensor_free(tc, &b), tensor_free(tc, &c);
  tensor_ctx_destroy(tc);
  return flops;
}

#endif
