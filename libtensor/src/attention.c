/* Causal self-attention, softmax(Q K^T / sqrt(d) + mask) V (Vaswani et al.
 * 2017, eq. 1), computed per (batch, head) with OpenBLAS GEMMs. Only the
 * per-row log-sum-exp leaves the forward; the backward rebuilds the
 * probabilities from Q, K and it (Dao et al. 2022, FlashAttention,
 * algorithm 2 / appendix B.2): dV = P^T dO, dP = dO V^T,
 * dS = P (dP - rowsum(P dP)), dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "simd.h"
#include "tensor_internal.h"

/* Query rows per causal block: each block multiplies only against the keys
 * it can see, about (1 + 1/nblocks)/2 of the full T x T work, while smaller
 * blocks make smaller GEMMs. Measured forward + backward on 2 threads (AMD
 * EPYC, head size 64): T = 64 runs 10-20% faster with 16-row blocks than
 * with 64, T = 256 4% faster with 32; T = 128 and T >= 512 are best with 64. */
static int causal_block(int T) { return T <= 64 ? 16 : T >= 192 && T <= 384 ? 32 : 64; }

static int check_attn(tensor_ctx_t *ctx, const char *fn, const tensor_t *qkv, const tensor_t *out,
                      const tensor_t *lse, int heads, int *B, int *T, int *C) {
  int rc = STRATA_OK;
  char s1[96], s2[96], s3[96];
  TRY(tensor_check_act(ctx, fn, "qkv", qkv, tensor_act_dtype(qkv), 3, 3));
  TRY(tensor_check_act(ctx, fn, "out", out, qkv->dtype, 3, 3));
  TRY(tensor_check(ctx, fn, "lse", lse, TENSOR_F32, 3, 3));
  TRY(tensor_check_device(ctx, fn, "out", out, qkv->device));
  TRY(tensor_check_device(ctx, fn, "lse", lse, qkv->device));
  *B = (int)qkv->shape[0];
  *T = (int)qkv->shape[1];
  *C = (int)qkv->shape[2] / 3;
  CHECK(heads > 0 && qkv->shape[2] % 3 == 0 && *C % heads == 0, STRATA_ESHAPE,
        "%s: qkv %s cannot hold %d heads (last dim must be 3 * heads * head_size)", fn,
        tensor_describe(qkv, s1, sizeof s1), heads);
  CHECK(out->shape[0] == *B && out->shape[1] == *T && out->shape[2] == *C, STRATA_ESHAPE,
        "%s: out %s for qkv %s", fn, tensor_describe(out, s1, sizeof s1),
        tensor_describe(qkv, s2, sizeof s2));
  CHECK(lse->shape[0] == *B && lse->shape[1] == heads && lse->shape[2] == *T, STRATA_ESHAPE,
        "%s: lse %s must be (%d, %d, %d) for qkv %s", fn, tensor_describe(lse, s1, sizeof s1), *B,
        heads, *T, tensor_describe(qkv, s3, sizeof s3));
fail:
  return rc;
}

/* The largest of s[0..n). */
static float row_max(const float *s, int n) {
  int j = 0;
  float m = -INFINITY;
#if defined(TENSOR_HAVE_AVX2)
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(s);
    for (j = 8; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + j));
    m = hmax256(vm);
  }
#endif
  for (; j < n; j++) m = s[j] > m ? s[j] : m;
  return m;
}

/* s[0..n) *= a */
static void row_scale(float *s, int n, float a) {
#pragma omp simd
  for (int j = 0; j < n; j++) s[j] *= a;
}

/* Row i of the causal softmax: p[j] = exp(s[j] - m) for j <= i, 0 beyond;
 * returns the sum. */
static float causal_exp_row(float *s, int i, int T, float m) {
  int j = 0, n = i + 1;
  float sum = 0.f;
#if defined(TENSOR_HAVE_AVX2)
  __m256 vs = _mm256_setzero_ps(), mm = _mm256_set1_ps(m);
  for (; j + 8 <= n; j += 8) {
    __m256 p = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), mm));
    _mm256_storeu_ps(s + j, p);
    vs = _mm256_add_ps(vs, p);
  }
  sum = hsum256(vs);
#endif
  for (; j < n; j++) {
    s[j] = expf(s[j] - m);
    sum += s[j];
  }
  for (j = n; j < T; j++) s[j] = 0.f;
  return sum;
}

#if defined(STRATA_CUDA)
/* 16-bit activations where cuDNN declines (f16, or no cuDNN plan): strata's
 * f32 kernel on f32 copies (counted by the accountant while they live).
 * Forward (dqkv NULL): out, lse from qkv. Backward: dqkv += the gradient,
 * from dout, qkv, out and lse. */
static int attention16(tensor_ctx_t *ctx, tensor_t *out, tensor_t *lse, tensor_t *dqkv, const tensor_t *dout,
                       const tensor_t *qkv, int heads) {
  int rc = STRATA_OK, dev = qkv->device;
  tensor_t q = {0}, o = {0}, dq = {0}, d = {0}, g16 = {0};
  TRY(tensor_alloc(ctx, &q, TENSOR_F32, dev, 3, qkv->shape));
  TRY(tensor_alloc(ctx, &o, TENSOR_F32, dev, 3, out->shape));
  TRY(tensor_cast(ctx, &q, qkv));
  if (!dqkv) {
    TRY(tensor_attention_forward(ctx, &o, lse, &q, heads));
    TRY(tensor_cast(ctx, out, &o));
    goto fail;
  }
  TRY(tensor_alloc(ctx, &dq, TENSOR_F32, dev, 3, qkv->shape));
  TRY(tensor_alloc(ctx, &d, TENSOR_F32, dev, 3, out->shape));
  TRY(tensor_alloc(ctx, &g16, qkv->dtype, dev, 3, qkv->shape));
  TRY(tensor_cast(ctx, &o, out));
  TRY(tensor_cast(ctx, &d, dout));
  TRY(tensor_attention_backward(ctx, &dq, &d, &q, &o, lse, heads));
  TRY(tensor_cast(ctx, &g16, &dq));
  TRY(tcu_acc(ctx, dqkv->data, g16.data, (int)dqkv->dtype, tensor_numel(dqkv)));
fail:
  tensor_free(ctx, &q), tensor_free(ctx, &o), tensor_free(ctx, &dq), tensor_free(ctx, &d), tensor_free(ctx, &g16);
  return rc;
}
#endif

int tensor_attention_forward(tensor_ctx_t *ctx, tensor_t *out, tensor_t *lse, const tensor_t *qkv,
                             int heads) {
  int rc = STRATA_OK, B, T, C, fail_alloc = 0;
  if (!ctx) return STRATA_EINVAL;
  TRY(check_attn(ctx, "tensor_attention_forward", qkv, out, lse, heads, &B, &T, &C));
  if (qkv->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    rc = tcu_attention_forward(ctx, out->data, lse->data, qkv->data, (int)qkv->dtype, B, T, C, heads);
    if (rc == STRATA_EUNSUPPORTED && qkv->dtype != TENSOR_F32) rc = attention16(ctx, out, lse, NULL, NULL, qkv, heads);
#endif
    goto fail;
  }
  int hs = C / heads, C3 = 3 * C, TB = causal_block(T);
  float scale = 1.f / sqrtf((float)hs);
  const float *x = qkv->data;
  float *y = out->data, *L = lse->data;
#pragma omp parallel num_threads(ctx->threads)
  {
    float *S = tensor_scratch(ctx, omp_get_thread_num(), (size_t)T * T * sizeof(float));
    if (!S) {
#pragma omp atomic write
      fail_alloc = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * heads; bh++) {
      if (!S) continue;
      int b = bh / heads, h = bh % heads;
      const float *q = x + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
      /* Causal blocking: query rows [r0, r1) only see keys [0, r1). */
      for (int r0 = 0; r0 < T; r0 += TB) {
        int r1 = r0 + TB < T ? r0 + TB : T, nr = r1 - r0;
        float *Sb = S + (size_t)r0 * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, r1, hs, scale, q + (size_t)r0 * C3, C3, k,
                    C3, 0.f, Sb, T);
        for (int i = r0; i < r1; i++) {
          float *s = S + (size_t)i * T, m = row_max(s, i + 1);
          float sum = causal_exp_row(s, i, r1, m);
          row_scale(s, i + 1, 1.f / sum);
          L[(size_t)bh * T + i] = m + logf(sum);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, r1, 1.f, Sb, T, v, C3, 0.f,
                    y + ((size_t)b * T + r0) * C + h * hs, C);
      }
    }
  }
  CHECK(!fail_alloc, STRATA_ENOMEM, "tensor_attention_forward: %d x %d scratch per thread", T, T);
fail:
  return rc;
}

int tensor_attention_backward(tensor_ctx_t *ctx, tensor_t *dqkv, const tensor_t *dout,
                              const tensor_t *qkv, const tensor_t *out, const tensor_t *lse,
                              int heads) {
  int rc = STRATA_OK, B, T, C, fail_alloc = 0;
  char s1[96], s2[96];
  const char *fn = "tensor_attention_backward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_attn(ctx, fn, qkv, out, lse, heads, &B, &T, &C));
  TRY(tensor_check_act(ctx, fn, "dout", dout, qkv->dtype, 3, 3));
  TRY(tensor_check_device(ctx, fn, "dout", dout, qkv->device));
  CHECK(tensor_same_shape(dout, out), STRATA_ESHAPE, "%s: dout %s != out %s", fn,
        tensor_describe(dout, s1, sizeof s1), tensor_describe(out, s2, sizeof s2));
  if (!dqkv) goto fail;
  TRY(tensor_check_act(ctx, fn, "dqkv", dqkv, qkv->dtype, 3, 3));
  TRY(tensor_check_device(ctx, fn, "dqkv", dqkv, qkv->device));
  CHECK(tensor_same_shape(dqkv, qkv), STRATA_ESHAPE, "%s: dqkv %s != qkv %s", fn,
        tensor_describe(dqkv, s1, sizeof s1), tensor_describe(qkv, s2, sizeof s2));
  if (qkv->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    rc = tcu_attention_backward(ctx, dqkv->data, dout->data, qkv->data, out->data, (int)qkv->dtype, lse->data, B,
                                T, C, heads);
    if (rc == STRATA_EUNSUPPORTED && qkv->dtype != TENSOR_F32)
      rc = attention16(ctx, (tensor_t *)out, (tensor_t *)lse, dqkv, dout, qkv, heads);
#endif
    goto fail;
  }
  int hs = C / heads, C3 = 3 * C, TB = causal_block(T);
  float scale = 1.f / sqrtf((float)hs);
  const float *x = qkv->data, *dy = dout->data, *L = lse->data;
  float *dx = dqkv->data;
#pragma omp parallel num_threads(ctx->threads)
  {
    float *P = tensor_scratch(ctx, omp_get_thread_num(), (size_t)2 * T * T * sizeof(float));
    float *dP = P ? P + (size_t)T * T : NULL;
    if (!P) {
#pragma omp atomic write
      fail_alloc = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * heads; bh++) {
      if (!P) continue;
      int b = bh / heads, h = bh % heads;
      size_t base = (size_t)b * T * C3 + h * hs;
      const float *q = x + base, *k = q + C, *v = q + 2 * C;
      const float *g = dy + (size_t)b * T * C + h * hs;
      float *dq = dx + base, *dk = dq + C, *dv = dq + 2 * C;
      for (int r0 = 0; r0 < T; r0 += TB) {
        int r1 = r0 + TB < T ? r0 + TB : T, nr = r1 - r0;
        float *Pb = P + (size_t)r0 * T, *dPb = dP + (size_t)r0 * T;
        const float *gb = g + (size_t)r0 * C, *qb = q + (size_t)r0 * C3;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, r1, hs, scale, qb, C3, k, C3, 0.f, Pb, T);
        for (int i = r0; i < r1; i++) causal_exp_row(P + (size_t)i * T, i, r1, L[(size_t)bh * T + i]);
        /* dV += P^T dO; dP = dO V^T */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, nr, 1.f, Pb, T, gb, C, 1.f, dv, C3);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, r1, hs, 1.f, gb, C, v, C3, 0.f, dPb, T);
        for (int i = r0; i < r1; i++) {
          float *p = P + (size_t)i * T, *dp = dP + (size_t)i * T, dsum = 0.f;
#pragma omp simd reduction(+ : dsum)
          for (int j = 0; j <= i; j++) dsum += p[j] * dp[j];
#pragma omp simd
          for (int j = 0; j <= i; j++) dp[j] = p[j] * (dp[j] - dsum) * scale;
          for (int j = i + 1; j < r1; j++) dp[j] = 0.f;
        }
        /* dQ += dS K; dK += dS^T Q */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, r1, 1.f, dPb, T, k, C3, 1.f,
                    dq + (size_t)r0 * C3, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, nr, 1.f, dPb, T, qb, C3, 1.f, dk, C3);
      }
    }
  }
  CHECK(!fail_alloc, STRATA_ENOMEM, "%s: 2 x %d x %d scratch per thread", fn, T, T);
fail:
  return rc;
}
