/* Residual add and GELU. f32 on the CPU; on CUDA the operands of one call
 * may instead all be bf16 or all f16 (the arithmetic in f32). */
#include <math.h>

#include "simd.h"
#include "tensor_internal.h"

static int check_same(tensor_ctx_t *ctx, const char *fn, const char *wa, const tensor_t *a,
                      const char *wb, const tensor_t *b) {
  int rc = STRATA_OK;
  char s1[96], s2[96];
  TRY(tensor_check_act(ctx, fn, wa, a, tensor_act_dtype(a), 1, 4));
  TRY(tensor_check_act(ctx, fn, wb, b, a->dtype, 1, 4));
  TRY(tensor_check_device(ctx, fn, wb, b, a->device));
  CHECK(tensor_same_shape(a, b), STRATA_ESHAPE, "%s: %s %s and %s %s differ", fn, wa,
        tensor_describe(a, s1, sizeof s1), wb, tensor_describe(b, s2, sizeof s2));
fail:
  return rc;
}

int tensor_add_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *a, const tensor_t *b) {
  int rc = STRATA_OK;
  const char *fn = "tensor_add_forward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_same(ctx, fn, "out", out, "a", a));
  TRY(check_same(ctx, fn, "out", out, "b", b));
  int64_t n = tensor_numel(out);
  if (out->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_add(ctx, out->data, a->data, b->data, (int)out->dtype, n));
#endif
    goto fail;
  }
  float *o = out->data;
  const float *x = a->data, *y = b->data;
#pragma omp parallel for simd num_threads(ctx->threads) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; i++) o[i] = x[i] + y[i];
fail:
  return rc;
}

static int acc(tensor_ctx_t *ctx, tensor_t *d, const tensor_t *g) {
  int64_t n = tensor_numel(g);
  if (d->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    return tcu_acc(ctx, d->data, g->data, (int)d->dtype, n);
#else
    return STRATA_EUNSUPPORTED;
#endif
  }
  float *o = d->data;
  const float *x = g->data;
#pragma omp parallel for simd num_threads(ctx->threads) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; i++) o[i] += x[i];
  return STRATA_OK;
}

int tensor_add_backward(tensor_ctx_t *ctx, tensor_t *da, tensor_t *db, const tensor_t *dout) {
  int rc = STRATA_OK;
  const char *fn = "tensor_add_backward";
  if (!ctx) return STRATA_EINVAL;
  TRY(tensor_check_act(ctx, fn, "dout", dout, tensor_act_dtype(dout), 1, 4));
  if (da) TRY(check_same(ctx, fn, "dout", dout, "da", da));
  if (db) TRY(check_same(ctx, fn, "dout", dout, "db", db));
  if (da) TRY(acc(ctx, da, dout));
  if (db) TRY(acc(ctx, db, dout));
fail:
  return rc;
}

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

int tensor_gelu_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *in) {
  int rc = STRATA_OK;
  if (!ctx) return STRATA_EINVAL;
  TRY(check_same(ctx, "tensor_gelu_forward", "out", out, "in", in));
  int64_t n = tensor_numel(in);
  if (out->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_gelu_forward(ctx, out->data, in->data, (int)in->dtype, n));
#endif
    goto fail;
  }
  float *o = out->data;
  const float *x = in->data;
  int64_t nb = (n + 4095) / 4096;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (n > 32768)
  for (int64_t blk = 0; blk < nb; blk++) {
    int64_t i = blk * 4096, end = i + 4096 < n ? i + 4096 : n;
#if defined(TENSOR_HAVE_AVX2)
    const __m256 s = _mm256_set1_ps(GELU_S), c = _mm256_set1_ps(GELU_C), h = _mm256_set1_ps(0.5f);
    for (; i + 8 <= end; i += 8) {
      __m256 v = _mm256_loadu_ps(x + i);
      __m256 u = _mm256_mul_ps(s, _mm256_fmadd_ps(_mm256_mul_ps(c, v), _mm256_mul_ps(v, v), v));
      __m256 t = tanh256(u);
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(h, v), _mm256_add_ps(_mm256_set1_ps(1.f), t)));
    }
#endif
    for (; i < end; i++) {
      float v = x[i], u = GELU_S * (v + GELU_C * v * v * v);
      o[i] = 0.5f * v * (1.f + tensor_tanhf(u));
    }
  }
fail:
  return rc;
}

int tensor_gelu_backward(tensor_ctx_t *ctx, tensor_t *din, const tensor_t *dout, const tensor_t *in) {
  int rc = STRATA_OK;
  const char *fn = "tensor_gelu_backward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_same(ctx, fn, "dout", dout, "in", in));
  if (!din) goto fail;
  TRY(check_same(ctx, fn, "dout", dout, "din", din));
  int64_t n = tensor_numel(in);
  if (din->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_gelu_backward(ctx, din->data, dout->data, in->data, (int)in->dtype, n));
#endif
    goto fail;
  }
  float *d = din->data;
  const float *g = dout->data, *x = in->data;
  int64_t nb = (n + 4095) / 4096;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (n > 32768)
  for (int64_t blk = 0; blk < nb; blk++) {
    int64_t i = blk * 4096, end = i + 4096 < n ? i + 4096 : n;
#if defined(TENSOR_HAVE_AVX2)
    const __m256 s = _mm256_set1_ps(GELU_S), c = _mm256_set1_ps(GELU_C), h = _mm256_set1_ps(0.5f);
    const __m256 one = _mm256_set1_ps(1.f), c3 = _mm256_set1_ps(3.f * GELU_C);
    for (; i + 8 <= end; i += 8) {
      __m256 v = _mm256_loadu_ps(x + i), v2 = _mm256_mul_ps(v, v);
      __m256 u = _mm256_mul_ps(s, _mm256_fmadd_ps(_mm256_mul_ps(c, v), v2, v));
      __m256 t = tanh256(u);
      __m256 sech2 = _mm256_fnmadd_ps(t, t, one);
      __m256 du = _mm256_mul_ps(s, _mm256_fmadd_ps(c3, v2, one));
      __m256 grad = _mm256_fmadd_ps(h, one, _mm256_mul_ps(h, t));
      grad = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(h, v), sech2), du, grad);
      _mm256_storeu_ps(d + i, _mm256_fmadd_ps(grad, _mm256_loadu_ps(g + i), _mm256_loadu_ps(d + i)));
    }
#endif
    for (; i < end; i++) {
      float v = x[i], u = GELU_S * (v + GELU_C * v * v * v), t = tensor_tanhf(u);
      float grad = 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * GELU_S * (1.f + 3.f * GELU_C * v * v);
      d[i] += grad * g[i];
    }
  }
fail:
  return rc;
}
