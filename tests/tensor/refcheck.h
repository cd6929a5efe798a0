/* Test helpers: double-precision reference forwards and central finite
 * differences of L = sum(out * R) with respect to every input element. */
#ifndef STRATA_TESTS_TENSOR_REFCHECK_H
#define STRATA_TESTS_TENSOR_REFCHECK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <strata/tensor.h>

/* A reference forward: reads inputs in[0..nin), writes nout outputs. */
typedef void (*ref_fn)(double *const *in, double *out, const void *arg);

static inline double *dalloc(int64_t n) { return calloc((size_t)n, sizeof(double)); }

/* Deterministic test data in [-1, 1) from the library's own Philox (the
 * values only need to be varied, not independent of the library). */
static inline void rnd(float *x, int64_t n, uint64_t seed, float scale) {
  uint32_t key[2], r[4];
  tensor_rng_key(key, seed, "test");
  for (int64_t i = 0; i < n; i++) {
    uint32_t c[4] = {(uint32_t)i, 0, 7, 0};
    tensor_philox(r, key, c);
    x[i] = scale * ((float)(r[0] >> 8) / 8388608.f - 1.f);
  }
}

static inline void to_d(double *d, const float *f, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = f[i];
}

/* grad[k][j] = dL/d in[k][j] by central differences in double precision; the
 * step 1e-6 on O(1) values leaves truncation error O(h^2) ~ 1e-12 and
 * rounding error ~ 1e-16/1e-6 = 1e-10: far below the float errors checked. */
static inline void fd_grad(ref_fn f, const void *arg, int nin, double **in, const int64_t *sizes,
                           const int *want, int64_t nout, const double *R, double **grad) {
  double *out = dalloc(nout);
  const double h = 1e-6;
  for (int k = 0; k < nin; k++) {
    if (!want[k]) continue;
    for (int64_t j = 0; j < sizes[k]; j++) {
      double save = in[k][j], lp = 0, lm = 0;
      in[k][j] = save + h;
      f(in, out, arg);
      for (int64_t o = 0; o < nout; o++) lp += out[o] * R[o];
      in[k][j] = save - h;
      f(in, out, arg);
      for (int64_t o = 0; o < nout; o++) lm += out[o] * R[o];
      in[k][j] = save;
      grad[k][j] = (lp - lm) / (2 * h);
    }
  }
  free(out);
}

/* Largest |a - b| / (atol + rtol |b|); <= 1 passes. */
static inline double maxerr(const float *a, const double *b, int64_t n, double atol, double rtol) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]) / (atol + rtol * fabs(b[i]));
    if (!(e <= m)) m = e; /* NaN propagates as failure */
  }
  return m;
}

#endif
