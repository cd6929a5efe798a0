/* LayerNorm over the last dim (Ba, Kiros, Hinton 2016, eq. 3-4), with the
 * backward in the closed form dx = rstd (dn - mean(dn) - n mean(dn n)),
 * n = (x - mean) rstd, dn = dout * weight. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_internal.h"

static int check_ln(tensor_ctx_t *ctx, const char *fn, const tensor_t *x, const tensor_t *w,
                    const tensor_t *b, const tensor_t *mean, const tensor_t *rstd, int64_t *rows,
                    int *C) {
  int rc = STRATA_OK;
  char s1[96], s2[96];
  TRY(tensor_check_act(ctx, fn, "in", x, tensor_act_dtype(x), 1, 4));
  TRY(tensor_check(ctx, fn, "weight", w, TENSOR_F32, 1, 1));
  TRY(tensor_check(ctx, fn, "mean", mean, TENSOR_F32, 1, 4));
  TRY(tensor_check(ctx, fn, "rstd", rstd, TENSOR_F32, 1, 4));
  TRY(tensor_check_device(ctx, fn, "weight", w, x->device));
  TRY(tensor_check_device(ctx, fn, "mean", mean, x->device));
  TRY(tensor_check_device(ctx, fn, "rstd", rstd, x->device));
  *C = (int)x->shape[x->ndim - 1];
  *rows = tensor_numel(x) / *C;
  CHECK(w->shape[0] == *C, STRATA_ESHAPE, "%s: weight %s, in %s", fn, tensor_describe(w, s1, sizeof s1),
        tensor_describe(x, s2, sizeof s2));
  CHECK(tensor_numel(mean) == *rows && tensor_numel(rstd) == *rows, STRATA_ESHAPE,
        "%s: mean %s / rstd must hold one value per row of in %s", fn,
        tensor_describe(mean, s1, sizeof s1), tensor_describe(x, s2, sizeof s2));
  if (b) {
    TRY(tensor_check(ctx, fn, "bias", b, TENSOR_F32, 1, 1));
    TRY(tensor_check_device(ctx, fn, "bias", b, x->device));
    CHECK(b->shape[0] == *C, STRATA_ESHAPE, "%s: bias %s, in %s", fn, tensor_describe(b, s1, sizeof s1),
          tensor_describe(x, s2, sizeof s2));
  }
fail:
  return rc;
}

int tensor_layernorm_forward(tensor_ctx_t *ctx, tensor_t *out, tensor_t *mean, tensor_t *rstd,
                             const tensor_t *in, const tensor_t *weight, const tensor_t *bias,
                             float eps) {
  int rc = STRATA_OK, C;
  int64_t rows;
  char s1[96], s2[96];
  const char *fn = "tensor_layernorm_forward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_ln(ctx, fn, in, weight, bias, mean, rstd, &rows, &C));
  TRY(tensor_check_act(ctx, fn, "out", out, in->dtype, 1, 4));
  TRY(tensor_check_device(ctx, fn, "out", out, in->device));
  CHECK(tensor_same_shape(out, in), STRATA_ESHAPE, "%s: out %s != in %s", fn,
        tensor_describe(out, s1, sizeof s1), tensor_describe(in, s2, sizeof s2));
  CHECK(eps >= 0.f, STRATA_EINVAL, "%s: eps %g < 0", fn, (double)eps);
  if (in->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_layernorm_forward(ctx, out->data, mean->data, rstd->data, in->data, (int)in->dtype, weight->data,
                              bias ? bias->data : NULL, rows, C, eps));
#endif
    goto fail;
  }
  float *o = out->data, *mu = mean->data, *rs = rstd->data;
  const float *x = in->data, *w = weight->data, *b = bias ? bias->data : NULL;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (rows * C > 16384)
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * C;
    float *orow = o + r * C;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < C; i++) s += xr[i];
    float m = s / C, v = 0.f;
#pragma omp simd reduction(+ : v)
    for (int i = 0; i < C; i++) v += (xr[i] - m) * (xr[i] - m);
    float q = 1.f / sqrtf(v / C + eps);
    if (b) {
#pragma omp simd
      for (int i = 0; i < C; i++) orow[i] = (xr[i] - m) * q * w[i] + b[i];
    } else {
#pragma omp simd
      for (int i = 0; i < C; i++) orow[i] = (xr[i] - m) * q * w[i];
    }
    mu[r] = m;
    rs[r] = q;
  }
fail:
  return rc;
}

int tensor_layernorm_backward(tensor_ctx_t *ctx, tensor_t *din, tensor_t *dweight, tensor_t *dbias,
                              const tensor_t *dout, const tensor_t *in, const tensor_t *weight,
                              const tensor_t *mean, const tensor_t *rstd) {
  int rc = STRATA_OK, C;
  int64_t rows;
  char s1[96], s2[96];
  float *part = NULL;
  const char *fn = "tensor_layernorm_backward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_ln(ctx, fn, in, weight, NULL, mean, rstd, &rows, &C));
  TRY(tensor_check_act(ctx, fn, "dout", dout, in->dtype, 1, 4));
  TRY(tensor_check_device(ctx, fn, "dout", dout, in->device));
  CHECK(tensor_same_shape(dout, in), STRATA_ESHAPE, "%s: dout %s != in %s", fn,
        tensor_describe(dout, s1, sizeof s1), tensor_describe(in, s2, sizeof s2));
  if (din) {
    TRY(tensor_check_act(ctx, fn, "din", din, in->dtype, 1, 4));
    TRY(tensor_check_device(ctx, fn, "din", din, in->device));
    CHECK(tensor_same_shape(din, in), STRATA_ESHAPE, "%s: din %s != in %s", fn,
          tensor_describe(din, s1, sizeof s1), tensor_describe(in, s2, sizeof s2));
  }
  if (dweight) {
    TRY(tensor_check(ctx, fn, "dweight", dweight, TENSOR_F32, 1, 1));
    TRY(tensor_check_device(ctx, fn, "dweight", dweight, in->device));
    CHECK(dweight->shape[0] == C, STRATA_ESHAPE, "%s: dweight %s, C = %d", fn,
          tensor_describe(dweight, s1, sizeof s1), C);
  }
  if (dbias) {
    TRY(tensor_check(ctx, fn, "dbias", dbias, TENSOR_F32, 1, 1));
    TRY(tensor_check_device(ctx, fn, "dbias", dbias, in->device));
    CHECK(dbias->shape[0] == C, STRATA_ESHAPE, "%s: dbias %s, C = %d", fn,
          tensor_describe(dbias, s1, sizeof s1), C);
  }
  if (in->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_layernorm_backward(ctx, din ? din->data : NULL, dweight ? dweight->data : NULL,
                               dbias ? dbias->data : NULL, dout->data, in->data, (int)in->dtype, weight->data,
                               mean->data, rstd->data, rows, C));
#endif
    goto fail;
  }
  int nt = ctx->threads;
  part = tensor_scratch(ctx, 0, (size_t)nt * 2 * C * sizeof(float)); /* per-thread dweight, dbias */
  if (part) memset(part, 0, (size_t)nt * 2 * C * sizeof(float));
  CHECK(part, STRATA_ENOMEM, "%s: %d x %d floats of scratch", fn, nt, 2 * C);
  const float *g = dout->data, *x = in->data, *w = weight->data, *mu = mean->data, *rs = rstd->data;
  float *dx = din ? din->data : NULL;
#pragma omp parallel num_threads(nt) if (rows * C > 16384)
  {
    float *dw = part + (size_t)omp_get_thread_num() * 2 * C, *db = dw + C;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
      const float *gr = g + r * C, *xr = x + r * C;
      float m = mu[r], q = rs[r], a = 0.f, bsum = 0.f;
#pragma omp simd reduction(+ : a, bsum)
      for (int i = 0; i < C; i++) {
        float n = (xr[i] - m) * q, dn = gr[i] * w[i];
        a += dn;
        bsum += dn * n;
        dw[i] += gr[i] * n;
        db[i] += gr[i];
      }
      a /= C;
      bsum /= C;
      if (dx) {
        float *dr = dx + r * C;
#pragma omp simd
        for (int i = 0; i < C; i++) dr[i] += q * (gr[i] * w[i] - a - (xr[i] - m) * q * bsum);
      }
    }
  }
  for (int t = 0; t < nt; t++) {
    const float *dw = part + (size_t)t * 2 * C, *db = dw + C;
    if (dweight)
      for (int i = 0; i < C; i++) ((float *)dweight->data)[i] += dw[i];
    if (dbias)
      for (int i = 0; i < C; i++) ((float *)dbias->data)[i] += db[i];
  }
fail:
  return rc;
}

int tensor_residual_layernorm_forward(tensor_ctx_t *ctx, tensor_t *resid, tensor_t *out, tensor_t *mean,
                                      tensor_t *rstd, const tensor_t *a, const tensor_t *b, const tensor_t *weight,
                                      const tensor_t *bias, float eps) {
  int rc = STRATA_OK, C;
  int64_t rows;
  char s1[96], s2[96];
  const char *fn = "tensor_residual_layernorm_forward";
  if (!ctx) return STRATA_EINVAL;
  TRY(tensor_check_act(ctx, fn, "a", a, tensor_act_dtype(a), 1, 4));
  TRY(tensor_check_act(ctx, fn, "b", b, a->dtype, 1, 4));
  TRY(tensor_check_act(ctx, fn, "resid", resid, a->dtype, 1, 4));
  TRY(tensor_check_device(ctx, fn, "b", b, a->device));
  TRY(tensor_check_device(ctx, fn, "resid", resid, a->device));
  CHECK(tensor_same_shape(a, b) && tensor_same_shape(resid, a), STRATA_ESHAPE, "%s: a %s, b %s and resid differ",
        fn, tensor_describe(a, s1, sizeof s1), tensor_describe(b, s2, sizeof s2));
  if (a->device == TENSOR_CPU) { /* the separate ops, which define the results */
    TRY(tensor_add_forward(ctx, resid, a, b));
    TRY(tensor_layernorm_forward(ctx, out, mean, rstd, resid, weight, bias, eps));
    goto fail;
  }
  TRY(check_ln(ctx, fn, resid, weight, bias, mean, rstd, &rows, &C));
  TRY(tensor_check_act(ctx, fn, "out", out, a->dtype, 1, 4));
  TRY(tensor_check_device(ctx, fn, "out", out, a->device));
  CHECK(tensor_same_shape(out, a), STRATA_ESHAPE, "%s: out %s != a %s", fn, tensor_describe(out, s1, sizeof s1),
        tensor_describe(a, s2, sizeof s2));
  CHECK(eps >= 0.f, STRATA_EINVAL, "%s: eps %g < 0", fn, (double)eps);
#if defined(STRATA_CUDA)
  TRY(tcu_residual_layernorm_forward(ctx, resid->data, out->data, mean->data, rstd->data, a->data, b->data,
                                     (int)a->dtype, weight->data, bias ? bias->data : NULL, rows, C, eps));
#endif
fail:
  return rc;
}

int tensor_residual_layernorm_backward(tensor_ctx_t *ctx, tensor_t *dresid, tensor_t *dweight, tensor_t *dbias,
                                       const tensor_t *dout, const tensor_t *resid, const tensor_t *weight,
                                       const tensor_t *mean, const tensor_t *rstd) {
  return tensor_layernorm_backward(ctx, dresid, dweight, dbias, dout, resid, weight, mean, rstd);
}
