/* Causal attention by blocks of keys, for sequence parallelism: ring
 * self-attention (Li et al. 2021, arXiv 2105.13120) keeps each rank's
 * queries and passes the key/value blocks around the ring. The softmax
 * runs across blocks without the full score matrix, as FlashAttention's
 * online softmax does (Dao et al. 2022, algorithm 1): per query row a
 * running maximum m and sum l of exp(s - m), the unnormalised output
 * rescaled by exp(m_old - m_new) whenever m grows; the backward rebuilds
 * each block's probabilities from the final log-sum-exp (algorithm 2).
 * Positions are global: key j of a block starting at k0 is visible to
 * query i of a block starting at q0 when k0 + j <= q0 + i. Per (batch,
 * head), OpenBLAS GEMMs on one thread each, OpenMP over the pairs; tensors
 * on a CUDA device go to the twins in cuda/attention_block.cu. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "tensor_internal.h"
#if defined(STRATA_CUDA)
#include "tensor_cuda.h"
#endif

/* A device tensor in a build without CUDA cannot exist; said all the same. */
#if defined(STRATA_CUDA)
#define ON_DEVICE(call) TRY(call)
#else
#define ON_DEVICE(call) CHECK(0, STRATA_EUNSUPPORTED, "%s: CUDA tensors in a build without CUDA", fn)
#endif

/* q (B,Tq,C), k and v (B,Tk,C), and a (B,NH,Tq) row tensor: shapes agree. */
static int check_block(tensor_ctx_t *ctx, const char *fn, const tensor_t *q, const tensor_t *k, const tensor_t *v,
                       const tensor_t *row, int heads) {
  int rc = STRATA_OK;
  char s1[96], s2[96];
  TRY(tensor_check(ctx, fn, "q", q, TENSOR_F32, 3, 3));
  TRY(tensor_check(ctx, fn, "k", k, TENSOR_F32, 3, 3));
  TRY(tensor_check(ctx, fn, "v", v, TENSOR_F32, 3, 3));
  TRY(tensor_check(ctx, fn, "rows", row, TENSOR_F32, 3, 3));
  TRY(tensor_check_device(ctx, fn, "k", k, q->device));
  TRY(tensor_check_device(ctx, fn, "v", v, q->device));
  TRY(tensor_check_device(ctx, fn, "rows", row, q->device));
  CHECK(tensor_same_shape(k, v) && k->shape[0] == q->shape[0] && k->shape[2] == q->shape[2], STRATA_ESHAPE,
        "%s: k %s and v must match q %s in batch and width", fn, tensor_describe(k, s1, sizeof s1),
        tensor_describe(q, s2, sizeof s2));
  CHECK(heads > 0 && q->shape[2] % heads == 0, STRATA_ESHAPE, "%s: width %lld is not %d heads", fn,
        (long long)q->shape[2], heads);
  CHECK(row->shape[0] == q->shape[0] && row->shape[1] == heads && row->shape[2] == q->shape[1], STRATA_ESHAPE,
        "%s: row tensor %s must be (%lld, %d, %lld)", fn, tensor_describe(row, s1, sizeof s1),
        (long long)q->shape[0], heads, (long long)q->shape[1]);
fail:
  return rc;
}

/* Keys of the block query i sees: [0, visible). */
static int visible(int64_t q0, int64_t k0, int i, int Tk) {
  int64_t n = q0 + i - k0 + 1;
  return n <= 0 ? 0 : n >= Tk ? Tk : (int)n;
}

int tensor_attention_block_forward(tensor_ctx_t *ctx, tensor_t *acc, tensor_t *m, tensor_t *l, const tensor_t *q,
                                   const tensor_t *k, const tensor_t *v, int heads, int64_t q0, int64_t k0) {
  int rc = STRATA_OK, fail_alloc = 0;
  const char *fn = "tensor_attention_block_forward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_block(ctx, fn, q, k, v, m, heads));
  TRY(tensor_check(ctx, fn, "acc", acc, TENSOR_F32, 3, 3));
  CHECK(tensor_same_shape(acc, q) && tensor_same_shape(l, m), STRATA_ESHAPE, "%s: acc or l misshapen", fn);
  TRY(tensor_check_device(ctx, fn, "acc", acc, q->device));
  TRY(tensor_check_device(ctx, fn, "l", l, q->device));
  int B = (int)q->shape[0], Tq = (int)q->shape[1], Tk = (int)k->shape[1], C = (int)q->shape[2], hs = C / heads;
  if (k0 > q0 + Tq - 1) goto fail; /* every key is ahead of every query */
  if (q->device != TENSOR_CPU) {
    ON_DEVICE(tcu_attention_block_forward(ctx, acc->data, m->data, l->data, q->data, k->data, v->data, B, Tq, Tk, C,
                                          heads, q0, k0));
    goto fail;
  }
  float scale = 1.f / sqrtf((float)hs);
#pragma omp parallel num_threads(ctx->threads)
  {
    float *S = tensor_scratch(ctx, omp_get_thread_num(), (size_t)Tq * Tk * sizeof(float));
    if (!S) {
#pragma omp atomic write
      fail_alloc = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * heads; bh++) {
      if (!S) continue;
      int b = bh / heads, h = bh % heads;
      const float *qb = (const float *)q->data + (size_t)b * Tq * C + h * hs;
      const float *kb = (const float *)k->data + (size_t)b * Tk * C + h * hs;
      const float *vb = (const float *)v->data + (size_t)b * Tk * C + h * hs;
      float *ab = (float *)acc->data + (size_t)b * Tq * C + h * hs;
      float *M = (float *)m->data + (size_t)bh * Tq, *Lr = (float *)l->data + (size_t)bh * Tq;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hs, scale, qb, C, kb, C, 0.f, S, Tk);
      for (int i = 0; i < Tq; i++) {
        float *s = S + (size_t)i * Tk;
        int n = visible(q0, k0, i, Tk);
        float mx = -INFINITY, sum = 0.f;
        for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
        float mnew = n && mx > M[i] ? mx : M[i];
        float alpha = M[i] == -INFINITY ? 0.f : expf(M[i] - mnew);
        for (int j = 0; j < n; j++) sum += (s[j] = expf(s[j] - mnew));
        for (int j = n; j < Tk; j++) s[j] = 0.f;
        if (n && alpha != 1.f) {
          float *a = ab + (size_t)i * C;
          for (int c = 0; c < hs; c++) a[c] *= alpha;
          Lr[i] *= alpha;
        }
        if (n) M[i] = mnew, Lr[i] += sum;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, hs, Tk, 1.f, S, Tk, vb, C, 1.f, ab, C);
    }
  }
  CHECK(!fail_alloc, STRATA_ENOMEM, "%s: %d x %d scratch per thread", fn, Tq, Tk);
fail:
  return rc;
}

int tensor_attention_block_finish(tensor_ctx_t *ctx, tensor_t *out, tensor_t *lse, const tensor_t *acc,
                                  const tensor_t *m, const tensor_t *l, int heads) {
  int rc = STRATA_OK;
  const char *fn = "tensor_attention_block_finish";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_block(ctx, fn, acc, acc, acc, m, heads));
  CHECK(tensor_same_shape(out, acc) && tensor_same_shape(lse, m) && tensor_same_shape(l, m), STRATA_ESHAPE,
        "%s: out, lse or l misshapen", fn);
  TRY(tensor_check_device(ctx, fn, "out", out, acc->device));
  TRY(tensor_check_device(ctx, fn, "lse", lse, acc->device));
  TRY(tensor_check_device(ctx, fn, "l", l, acc->device));
  int B = (int)acc->shape[0], T = (int)acc->shape[1], C = (int)acc->shape[2], hs = C / heads;
  if (acc->device != TENSOR_CPU) {
    ON_DEVICE(tcu_attention_block_finish(ctx, out->data, lse->data, acc->data, m->data, l->data, B, T, C, heads));
    goto fail;
  }
#pragma omp parallel for num_threads(ctx->threads) schedule(static)
  for (int bh = 0; bh < B * heads; bh++) {
    int b = bh / heads, h = bh % heads;
    for (int i = 0; i < T; i++) {
      size_t r = (size_t)bh * T + i, o = ((size_t)b * T + i) * C + h * hs;
      float li = ((const float *)l->data)[r], inv = 1.f / li;
      for (int c = 0; c < hs; c++) ((float *)out->data)[o + c] = ((const float *)acc->data)[o + c] * inv;
      ((float *)lse->data)[r] = ((const float *)m->data)[r] + logf(li);
    }
  }
fail:
  return rc;
}

int tensor_attention_block_rowdot(tensor_ctx_t *ctx, tensor_t *d, const tensor_t *dout, const tensor_t *out,
                                  int heads) {
  int rc = STRATA_OK;
  const char *fn = "tensor_attention_block_rowdot";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_block(ctx, fn, out, dout, dout, d, heads));
  CHECK(tensor_same_shape(dout, out), STRATA_ESHAPE, "%s: dout and out differ in shape", fn);
  int B = (int)out->shape[0], T = (int)out->shape[1], C = (int)out->shape[2], hs = C / heads;
  if (out->device != TENSOR_CPU) {
    ON_DEVICE(tcu_attention_block_rowdot(ctx, d->data, dout->data, out->data, B, T, C, heads));
    goto fail;
  }
#pragma omp parallel for num_threads(ctx->threads) schedule(static)
  for (int bh = 0; bh < B * heads; bh++) {
    int b = bh / heads, h = bh % heads;
    for (int i = 0; i < T; i++) {
      size_t o = ((size_t)b * T + i) * C + h * hs;
      float s = 0.f;
      for (int c = 0; c < hs; c++) s += ((const float *)dout->data)[o + c] * ((const float *)out->data)[o + c];
      ((float *)d->data)[(size_t)bh * T + i] = s;
    }
  }
fail:
  return rc;
}

int tensor_attention_block_backward(tensor_ctx_t *ctx, tensor_t *dq, tensor_t *dk, tensor_t *dv,
                                    const tensor_t *dout, const tensor_t *q, const tensor_t *k, const tensor_t *v,
                                    const tensor_t *lse, const tensor_t *d, int heads, int64_t q0, int64_t k0) {
  int rc = STRATA_OK, fail_alloc = 0;
  const char *fn = "tensor_attention_block_backward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_block(ctx, fn, q, k, v, lse, heads));
  CHECK(tensor_same_shape(dq, q) && tensor_same_shape(dout, q) && tensor_same_shape(dk, k) &&
            tensor_same_shape(dv, v) && tensor_same_shape(d, lse),
        STRATA_ESHAPE, "%s: a gradient misshapen", fn);
  TRY(tensor_check_device(ctx, fn, "dq", dq, q->device));
  TRY(tensor_check_device(ctx, fn, "dk", dk, q->device));
  TRY(tensor_check_device(ctx, fn, "dv", dv, q->device));
  TRY(tensor_check_device(ctx, fn, "dout", dout, q->device));
  TRY(tensor_check_device(ctx, fn, "d", d, q->device));
  int B = (int)q->shape[0], Tq = (int)q->shape[1], Tk = (int)k->shape[1], C = (int)q->shape[2], hs = C / heads;
  if (k0 > q0 + Tq - 1) goto fail;
  if (q->device != TENSOR_CPU) {
    ON_DEVICE(tcu_attention_block_backward(ctx, dq->data, dk->data, dv->data, dout->data, q->data, k->data, v->data,
                                           lse->data, d->data, B, Tq, Tk, C, heads, q0, k0));
    goto fail;
  }
  float scale = 1.f / sqrtf((float)hs);
  /* (heads of one batch row write disjoint columns of dk and dv: no two threads share an element) */
#pragma omp parallel num_threads(ctx->threads)
  {
    float *P = tensor_scratch(ctx, omp_get_thread_num(), (size_t)2 * Tq * Tk * sizeof(float));
    if (!P) {
#pragma omp atomic write
      fail_alloc = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * heads; bh++) {
      if (!P) continue;
      float *dP = P + (size_t)Tq * Tk;
      int b = bh / heads, h = bh % heads;
      size_t qo = (size_t)b * Tq * C + h * hs, ko = (size_t)b * Tk * C + h * hs;
      const float *qb = (const float *)q->data + qo, *kb = (const float *)k->data + ko;
      const float *vb = (const float *)v->data + ko, *gb = (const float *)dout->data + qo;
      const float *L = (const float *)lse->data + (size_t)bh * Tq, *D = (const float *)d->data + (size_t)bh * Tq;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hs, scale, qb, C, kb, C, 0.f, P, Tk);
      for (int i = 0; i < Tq; i++) {
        float *s = P + (size_t)i * Tk;
        int n = visible(q0, k0, i, Tk);
        for (int j = 0; j < n; j++) s[j] = expf(s[j] - L[i]);
        for (int j = n; j < Tk; j++) s[j] = 0.f;
      }
      /* dV += P^T dO; dP = dO V^T; dS = P (dP - D); dQ += dS K / sqrt(d); dK += dS^T Q / sqrt(d) */
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hs, Tq, 1.f, P, Tk, gb, C, 1.f,
                  (float *)dv->data + ko, C);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, hs, 1.f, gb, C, vb, C, 0.f, dP, Tk);
      for (int i = 0; i < Tq; i++)
        for (int j = 0; j < Tk; j++) dP[(size_t)i * Tk + j] = P[(size_t)i * Tk + j] * (dP[(size_t)i * Tk + j] - D[i]);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, hs, Tk, scale, dP, Tk, kb, C, 1.f,
                  (float *)dq->data + qo, C);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, hs, Tq, scale, dP, Tk, qb, C, 1.f,
                  (float *)dk->data + ko, C);
    }
  }
  CHECK(!fail_alloc, STRATA_ENOMEM, "%s: 2 x %d x %d scratch per thread", fn, Tq, Tk);
fail:
  return rc;
}
