/* LayerNorm of rows cut by columns over several ranks (strata/tensor.h:
 * tensor_layernorm_split_*), in phases between which the caller sums the
 * rows' partial statistics, and the 2-D transpose the multi-dimensional
 * tensor-parallel products take their weights through. The CPU loops are
 * serial, each row's sums in double in column order, so that a run is the
 * same bit for bit whatever the thread count. */
#include <math.h>
#include <string.h>

#include "tensor_internal.h"

/* in (.., A), its rows R; vectors v (R) on in's device; the parameter
 * vectors (A) when given. */
static int check_split(tensor_ctx_t *ctx, const char *fn, const tensor_t *in, int64_t C, int phase, int nphases,
                       int64_t *R, int64_t *A) {
  int rc = STRATA_OK;
  char s1[96];
  TRY(tensor_check(ctx, fn, "in", in, TENSOR_F32, 1, 4));
  *A = in->shape[in->ndim - 1];
  *R = *A ? tensor_numel(in) / *A : 0;
  CHECK(phase >= 0 && phase < nphases, STRATA_EINVAL, "%s: phase %d (0 .. %d)", fn, phase, nphases - 1);
  CHECK(C >= *A && *A > 0, STRATA_EINVAL, "%s: the whole rows' C = %lld must be >= this rank's columns of in %s", fn,
        (long long)C, tensor_describe(in, s1, sizeof s1));
fail:
  return rc;
}

static int check_vec(tensor_ctx_t *ctx, const char *fn, const char *what, const tensor_t *t, int64_t n,
                     const tensor_t *in) {
  int rc = STRATA_OK;
  char s1[96], s2[96];
  if (!t) return STRATA_OK;
  TRY(tensor_check(ctx, fn, what, t, TENSOR_F32, 1, 4));
  TRY(tensor_check_device(ctx, fn, what, t, in->device));
  CHECK(tensor_numel(t) == n, STRATA_ESHAPE, "%s: %s %s must hold %lld floats (in %s)", fn, what,
        tensor_describe(t, s1, sizeof s1), (long long)n, tensor_describe(in, s2, sizeof s2));
fail:
  return rc;
}

int tensor_layernorm_split_forward(tensor_ctx_t *ctx, tensor_t *out, tensor_t *mean, tensor_t *rstd,
                                   const tensor_t *in, const tensor_t *weight, const tensor_t *bias, int64_t C,
                                   float eps, int phase) {
  int rc = STRATA_OK;
  int64_t R = 0, A = 0;
  const char *fn = "tensor_layernorm_split_forward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_split(ctx, fn, in, C, phase, 3, &R, &A));
  CHECK(mean, STRATA_EINVAL, "%s: no mean", fn);
  TRY(check_vec(ctx, fn, "mean", mean, R, in));
  if (phase > 0) {
    CHECK(rstd, STRATA_EINVAL, "%s: no rstd (phase %d)", fn, phase);
    TRY(check_vec(ctx, fn, "rstd", rstd, R, in));
  }
  if (phase == 2) {
    CHECK(out && weight && bias, STRATA_EINVAL, "%s: phase 2 needs out, weight and bias", fn);
    TRY(check_vec(ctx, fn, "out", out, R * A, in));
    TRY(check_vec(ctx, fn, "weight", weight, A, in));
    TRY(check_vec(ctx, fn, "bias", bias, A, in));
    CHECK(eps >= 0.f, STRATA_EINVAL, "%s: eps %g < 0", fn, (double)eps);
  }
  if (in->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_layernorm_split_forward(ctx, out ? out->data : NULL, mean->data, rstd ? rstd->data : NULL, in->data,
                                    weight ? weight->data : NULL, bias ? bias->data : NULL, R, A, C, eps, phase));
#endif
    goto fail;
  }
  const float *x = in->data;
  float *mu = mean->data;
  if (phase == 0) {
    for (int64_t r = 0; r < R; r++) {
      double s = 0;
      for (int64_t c = 0; c < A; c++) s += x[r * A + c];
      mu[r] = (float)s;
    }
  } else if (phase == 1) {
    float *rs = rstd->data;
    for (int64_t r = 0; r < R; r++) {
      mu[r] /= (float)C;
      double s = 0;
      for (int64_t c = 0; c < A; c++) {
        double d = x[r * A + c] - mu[r];
        s += d * d;
      }
      rs[r] = (float)s;
    }
  } else {
    float *rs = rstd->data, *y = out->data;
    const float *gw = weight->data, *gb = bias->data;
    for (int64_t r = 0; r < R; r++) {
      rs[r] = 1.f / sqrtf(rs[r] / (float)C + eps);
      for (int64_t c = 0; c < A; c++) y[r * A + c] = (x[r * A + c] - mu[r]) * rs[r] * gw[c] + gb[c];
    }
  }
fail:
  return rc;
}

int tensor_layernorm_split_backward(tensor_ctx_t *ctx, tensor_t *din, tensor_t *dweight, tensor_t *dbias,
                                    tensor_t *stats, const tensor_t *dout, const tensor_t *in, const tensor_t *weight,
                                    const tensor_t *mean, const tensor_t *rstd, int64_t C, int phase) {
  int rc = STRATA_OK;
  int64_t R = 0, A = 0;
  const char *fn = "tensor_layernorm_split_backward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_split(ctx, fn, in, C, phase, 2, &R, &A));
  CHECK(stats && dout && weight && mean && rstd, STRATA_EINVAL, "%s: stats, dout, weight, mean and rstd are needed",
        fn);
  TRY(check_vec(ctx, fn, "stats", stats, 2 * R, in));
  TRY(check_vec(ctx, fn, "dout", dout, R * A, in));
  TRY(check_vec(ctx, fn, "weight", weight, A, in));
  TRY(check_vec(ctx, fn, "mean", mean, R, in));
  TRY(check_vec(ctx, fn, "rstd", rstd, R, in));
  if (phase == 0) {
    TRY(check_vec(ctx, fn, "dweight", dweight, A, in));
    TRY(check_vec(ctx, fn, "dbias", dbias, A, in));
  } else {
    CHECK(din, STRATA_EINVAL, "%s: phase 1 needs din", fn);
    TRY(check_vec(ctx, fn, "din", din, R * A, in));
  }
  if (in->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_layernorm_split_backward(ctx, din ? din->data : NULL, dweight ? dweight->data : NULL,
                                     dbias ? dbias->data : NULL, stats->data, dout->data, in->data, weight->data,
                                     mean->data, rstd->data, R, A, C, phase));
#endif
    goto fail;
  }
  const float *x = in->data, *dy = dout->data, *mu = mean->data, *rs = rstd->data, *gw = weight->data;
  float *st = stats->data;
  if (phase == 0) {
    float *dgw = dweight ? dweight->data : NULL, *dgb = dbias ? dbias->data : NULL;
    for (int64_t r = 0; r < R; r++) {
      double a = 0, b = 0;
      for (int64_t c = 0; c < A; c++) {
        float xh = (x[r * A + c] - mu[r]) * rs[r], g = dy[r * A + c] * gw[c];
        a += g, b += g * xh;
        if (dgw) dgw[c] += dy[r * A + c] * xh;
        if (dgb) dgb[c] += dy[r * A + c];
      }
      st[2 * r] = (float)a, st[2 * r + 1] = (float)b;
    }
  } else {
    float *dx = din->data, inv = 1.f / (float)C;
    for (int64_t r = 0; r < R; r++)
      for (int64_t c = 0; c < A; c++) {
        float xh = (x[r * A + c] - mu[r]) * rs[r], g = dy[r * A + c] * gw[c];
        dx[r * A + c] += rs[r] * (g - st[2 * r] * inv - xh * st[2 * r + 1] * inv);
      }
  }
fail:
  return rc;
}

int tensor_transpose(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *in, int accumulate) {
  int rc = STRATA_OK;
  char s1[96], s2[96];
  const char *fn = "tensor_transpose";
  if (!ctx) return STRATA_EINVAL;
  TRY(tensor_check(ctx, fn, "in", in, TENSOR_F32, 2, 2));
  TRY(tensor_check(ctx, fn, "out", out, TENSOR_F32, 2, 2));
  TRY(tensor_check_device(ctx, fn, "out", out, in->device));
  int64_t r = in->shape[0], c = in->shape[1];
  CHECK(out->shape[0] == c && out->shape[1] == r, STRATA_ESHAPE, "%s: out %s is not in %s transposed", fn,
        tensor_describe(out, s1, sizeof s1), tensor_describe(in, s2, sizeof s2));
  CHECK(out->data != in->data || !r || !c, STRATA_EINVAL, "%s: out may not alias in", fn);
  if (in->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_transpose(ctx, out->data, in->data, r, c, accumulate));
#endif
    goto fail;
  }
  float *dst = out->data;
  const float *src = in->data;
  for (int64_t i0 = 0; i0 < r; i0 += 32) /* blocks of 32 x 32: both sides stay in cache */
    for (int64_t j0 = 0; j0 < c; j0 += 32)
      for (int64_t i = i0; i < r && i < i0 + 32; i++)
        for (int64_t j = j0; j < c && j < j0 + 32; j++)
          if (accumulate) dst[j * r + i] += src[i * c + j];
          else dst[j * r + i] = src[i * c + j];
fail:
  return rc;
}
