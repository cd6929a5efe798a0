/* One new position against a KV cache: the attention of generation, where
 * each step adds one query and the keys and values of earlier positions are
 * kept (Vaswani et al. 2017, eq. 1, for a single row of Q; the causal mask
 * is the cache's length). */
#include <math.h>
#include <omp.h>

#include "tensor_internal.h"

int tensor_attention_decode(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *q, const tensor_t *k,
                            const tensor_t *v, int len, int heads) {
  static const char *fn = "tensor_attention_decode";
  int rc = STRATA_OK;
  char s1[96], s2[96];
  if (!ctx) return STRATA_EINVAL;
  TRY(tensor_check(ctx, fn, "q", q, TENSOR_F32, 2, 2));
  TRY(tensor_check(ctx, fn, "out", out, TENSOR_F32, 2, 2));
  TRY(tensor_check(ctx, fn, "k", k, TENSOR_F32, 3, 3));
  TRY(tensor_check(ctx, fn, "v", v, TENSOR_F32, 3, 3));
  TRY(tensor_check_device(ctx, fn, "out", out, q->device));
  TRY(tensor_check_device(ctx, fn, "k", k, q->device));
  TRY(tensor_check_device(ctx, fn, "v", v, q->device));
  int B = (int)q->shape[0], C = (int)q->shape[1], Tmax = (int)k->shape[1];
  CHECK(tensor_same_shape(q, out) && tensor_same_shape(k, v) && k->shape[0] == B && k->shape[2] == C,
        STRATA_ESHAPE, "%s: q and out (B, C), k and v (B, Tmax, C): q %s, k %s", fn,
        tensor_describe(q, s1, sizeof s1), tensor_describe(k, s2, sizeof s2));
  CHECK(heads > 0 && C % heads == 0, STRATA_ESHAPE, "%s: %d heads do not divide C = %d", fn, heads, C);
  CHECK(len >= 1 && len <= Tmax, STRATA_EINVAL, "%s: length %d outside [1, %d]", fn, len, Tmax);
  if (q->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_attention_decode(ctx, out->data, q->data, k->data, v->data, B, Tmax, C, heads, len));
#endif
    goto fail;
  }
  int hs = C / heads;
  float scale = 1.f / sqrtf((float)hs);
  const float *Q = q->data, *K = k->data, *V = v->data;
  float *O = out->data;
  int fail_alloc = 0;
#pragma omp parallel num_threads(ctx->threads) reduction(| : fail_alloc)
  {
    float *p = tensor_scratch(ctx, omp_get_thread_num(), (size_t)len * sizeof(float));
    if (!p) fail_alloc = 1;
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * heads; bh++) {
      if (!p) continue;
      int b = bh / heads, h = bh % heads;
      const float *qh = Q + (size_t)b * C + (size_t)h * hs;
      float m = -INFINITY, sum = 0.f;
      for (int t = 0; t < len; t++) {
        const float *kt = K + ((size_t)b * Tmax + t) * C + (size_t)h * hs;
        float s = 0.f;
        for (int d = 0; d < hs; d++) s += qh[d] * kt[d];
        p[t] = s * scale;
        if (p[t] > m) m = p[t];
      }
      for (int t = 0; t < len; t++) sum += (p[t] = expf(p[t] - m));
      float *oh = O + (size_t)b * C + (size_t)h * hs;
      for (int d = 0; d < hs; d++) oh[d] = 0.f;
      for (int t = 0; t < len; t++) {
        const float *vt = V + ((size_t)b * Tmax + t) * C + (size_t)h * hs;
        float w = p[t] / sum;
        for (int d = 0; d < hs; d++) oh[d] += w * vt[d];
      }
    }
  }
  CHECK(!fail_alloc, STRATA_ENOMEM, "%s: scratch for %d scores", fn, len);
fail:
  return rc;
}
