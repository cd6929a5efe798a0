/* Fused softmax cross-entropy: loss = logsumexp(z) - z[target], and
 * dz = softmax(z) - onehot(target), with the log-sum-exp kept from the
 * forward so the backward is one pass over the logits. */
#include <math.h>

#include "simd.h"
#include "tensor_internal.h"

/* slice: the logits are a vocabulary slice, and a target outside it is
 * another rank's (any target is then valid). */
static int check_xent(tensor_ctx_t *ctx, const char *fn, const tensor_t *logits,
                      const tensor_t *targets, const tensor_t *lse, int64_t *rows, int *V, int slice) {
  int rc = STRATA_OK;
  char s1[96], s2[96];
  TRY(tensor_check(ctx, fn, "logits", logits, TENSOR_F32, 1, 4));
  TRY(tensor_check(ctx, fn, "targets", targets, TENSOR_I32, 1, 4));
  TRY(tensor_check(ctx, fn, "lse", lse, TENSOR_F32, 1, 4));
  TRY(tensor_check_device(ctx, fn, "targets", targets, logits->device));
  TRY(tensor_check_device(ctx, fn, "lse", lse, logits->device));
  *V = (int)logits->shape[logits->ndim - 1];
  *rows = tensor_numel(logits) / *V;
  CHECK(tensor_numel(targets) == *rows && tensor_numel(lse) == *rows, STRATA_ESHAPE,
        "%s: targets %s and lse need one entry per row of logits %s", fn,
        tensor_describe(targets, s1, sizeof s1), tensor_describe(logits, s2, sizeof s2));
  if (logits->device == TENSOR_CPU && !slice) {
    const int32_t *t = targets->data;
    for (int64_t i = 0; i < *rows; i++)
      CHECK(t[i] < *V, STRATA_EINVAL, "%s: targets[%lld] = %d >= V = %d", fn, (long long)i, t[i], *V);
  }
fail:
  return rc;
}

static float row_lse(const float *z, int V) {
  int i = 0;
  float m = -INFINITY, s = 0.f;
#if defined(TENSOR_HAVE_AVX2)
  __m256 vm = _mm256_set1_ps(-INFINITY);
  for (; i + 8 <= V; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(z + i));
  m = hmax256(vm);
  for (int j = i; j < V; j++) m = z[j] > m ? z[j] : m;
  __m256 vs = _mm256_setzero_ps(), mm = _mm256_set1_ps(m);
  for (i = 0; i + 8 <= V; i += 8) vs = _mm256_add_ps(vs, exp256(_mm256_sub_ps(_mm256_loadu_ps(z + i), mm)));
  s = hsum256(vs);
#else
  for (int j = 0; j < V; j++) m = z[j] > m ? z[j] : m;
#endif
  for (; i < V; i++) s += expf(z[i] - m);
  return m + logf(s);
}

/* Per row of the slice [lo, lo + V) of the logits: its log-sum-exp into
 * ls, and the target's logit into zt when the slice holds it (else 0). */
static void xent_rows(const tensor_ctx_t *ctx, float *ls, float *zt, const float *z, const int32_t *t, int64_t rows,
                      int V, int64_t lo) {
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (rows * V > 32768)
  for (int64_t r = 0; r < rows; r++) {
    const float *zr = z + r * V;
    int64_t local = (int64_t)t[r] - lo;
    ls[r] = row_lse(zr, V);
    zt[r] = t[r] >= 0 && local >= 0 && local < V ? zr[local] : 0.f;
  }
}

int tensor_xent_forward(tensor_ctx_t *ctx, tensor_t *losses, tensor_t *lse, const tensor_t *logits,
                        const tensor_t *targets) {
  int rc = STRATA_OK, V;
  int64_t rows;
  char s1[96], s2[96];
  const char *fn = "tensor_xent_forward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_xent(ctx, fn, logits, targets, lse, &rows, &V, 0));
  TRY(tensor_check(ctx, fn, "losses", losses, TENSOR_F32, 1, 4));
  TRY(tensor_check_device(ctx, fn, "losses", losses, logits->device));
  CHECK(tensor_numel(losses) == rows, STRATA_ESHAPE, "%s: losses %s for logits %s", fn,
        tensor_describe(losses, s1, sizeof s1), tensor_describe(logits, s2, sizeof s2));
  if (logits->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_xent_forward(ctx, losses->data, lse->data, logits->data, targets->data, rows, V));
#endif
    goto fail;
  }
  const int32_t *t = targets->data;
  float *l = losses->data, *ls = lse->data;
  xent_rows(ctx, ls, l, logits->data, t, rows, V, 0); /* the target logits, then the losses */
  for (int64_t r = 0; r < rows; r++) l[r] = t[r] >= 0 ? ls[r] - l[r] : 0.f;
fail:
  return rc;
}

int tensor_xent_slice_forward(tensor_ctx_t *ctx, tensor_t *lse, tensor_t *zt, const tensor_t *logits,
                              const tensor_t *targets, int64_t vocab_lo) {
  int rc = STRATA_OK, V;
  int64_t rows;
  char s1[96], s2[96];
  const char *fn = "tensor_xent_slice_forward";
  if (!ctx) return STRATA_EINVAL;
  CHECK(vocab_lo >= 0, STRATA_EINVAL, "%s: vocab_lo %lld < 0", fn, (long long)vocab_lo);
  TRY(check_xent(ctx, fn, logits, targets, lse, &rows, &V, 1));
  TRY(tensor_check(ctx, fn, "zt", zt, TENSOR_F32, 1, 4));
  TRY(tensor_check_device(ctx, fn, "zt", zt, logits->device));
  CHECK(tensor_numel(zt) == rows, STRATA_ESHAPE, "%s: zt %s for logits %s", fn, tensor_describe(zt, s1, sizeof s1),
        tensor_describe(logits, s2, sizeof s2));
  if (logits->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_xent_slice_forward(ctx, lse->data, zt->data, logits->data, targets->data, rows, V, vocab_lo));
#endif
    goto fail;
  }
  xent_rows(ctx, lse->data, zt->data, logits->data, targets->data, rows, V, vocab_lo);
fail:
  return rc;
}

static int xent_backward(tensor_ctx_t *ctx, const char *fn, tensor_t *dlogits, const tensor_t *logits,
                         const tensor_t *lse, const tensor_t *targets, float dloss, int64_t lo, int slice) {
  int rc = STRATA_OK, V;
  int64_t rows;
  char s1[96], s2[96];
  if (!ctx) return STRATA_EINVAL;
  CHECK(lo >= 0, STRATA_EINVAL, "%s: vocab_lo %lld < 0", fn, (long long)lo);
  TRY(check_xent(ctx, fn, logits, targets, lse, &rows, &V, slice));
  if (!dlogits) goto fail;
  TRY(tensor_check(ctx, fn, "dlogits", dlogits, TENSOR_F32, 1, 4));
  TRY(tensor_check_device(ctx, fn, "dlogits", dlogits, logits->device));
  CHECK(tensor_same_shape(dlogits, logits), STRATA_ESHAPE, "%s: dlogits %s != logits %s", fn,
        tensor_describe(dlogits, s1, sizeof s1), tensor_describe(logits, s2, sizeof s2));
  if (logits->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_xent_backward(ctx, dlogits->data, logits->data, lse->data, targets->data, rows, V, dloss, lo, slice));
#endif
    goto fail;
  }
  const float *z = logits->data, *ls = lse->data;
  const int32_t *t = targets->data;
  float *dz = dlogits->data;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (rows * V > 32768)
  for (int64_t r = 0; r < rows; r++) {
    if (t[r] < 0) continue;
    const float *zr = z + r * V;
    float *dr = dz + r * V, m = ls[r];
    int i = 0;
#if defined(TENSOR_HAVE_AVX2)
    __m256 mm = _mm256_set1_ps(m), sc = _mm256_set1_ps(dloss);
    for (; i + 8 <= V; i += 8) {
      __m256 p = exp256(_mm256_sub_ps(_mm256_loadu_ps(zr + i), mm));
      _mm256_storeu_ps(dr + i, _mm256_fmadd_ps(p, sc, _mm256_loadu_ps(dr + i)));
    }
#endif
    for (; i < V; i++) dr[i] += dloss * expf(zr[i] - m);
    int64_t local = (int64_t)t[r] - lo;
    if (local >= 0 && local < V) dr[local] -= dloss;
  }
fail:
  return rc;
}

int tensor_xent_backward(tensor_ctx_t *ctx, tensor_t *dlogits, const tensor_t *logits, const tensor_t *lse,
                         const tensor_t *targets, float dloss) {
  return xent_backward(ctx, "tensor_xent_backward", dlogits, logits, lse, targets, dloss, 0, 0);
}

int tensor_xent_slice_backward(tensor_ctx_t *ctx, tensor_t *dlogits, const tensor_t *logits, const tensor_t *lse,
                               const tensor_t *targets, float dloss, int64_t vocab_lo) {
  return xent_backward(ctx, "tensor_xent_slice_backward", dlogits, logits, lse, targets, dloss, vocab_lo, 1);
}
