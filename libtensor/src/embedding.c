/* Token + position embedding lookup and its scatter-add backward. */
#include <stdint.h>
#include <string.h>

#include "tensor_internal.h"

/* slice: wte holds rows [lo, lo + V) of a vocabulary split over ranks, and
 * an id outside them is another rank's (any id >= 0 is valid). */
static int check_emb(tensor_ctx_t *ctx, const char *fn, const tensor_t *x, const tensor_t *ids,
                     const tensor_t *wte, const tensor_t *wpe, int *B, int *T, int *C, int *V, int slice) {
  int rc = STRATA_OK;
  char s1[96], s2[96], s3[96];
  TRY(tensor_check(ctx, fn, "ids", ids, TENSOR_I32, 2, 2));
  TRY(tensor_check_act(ctx, fn, "out", x, tensor_act_dtype(x), 3, 3));
  TRY(tensor_check_device(ctx, fn, "ids", ids, x->device));
  *B = (int)ids->shape[0];
  *T = (int)ids->shape[1];
  *C = (int)x->shape[2];
  *V = 0;
  CHECK(x->shape[0] == *B && x->shape[1] == *T, STRATA_ESHAPE, "%s: out %s for ids %s", fn,
        tensor_describe(x, s1, sizeof s1), tensor_describe(ids, s2, sizeof s2));
  if (wte) {
    TRY(tensor_check(ctx, fn, "wte", wte, TENSOR_F32, 2, 2));
    TRY(tensor_check_device(ctx, fn, "wte", wte, x->device));
    *V = (int)wte->shape[0];
    CHECK(wte->shape[1] == *C, STRATA_ESHAPE, "%s: wte %s, out %s", fn,
          tensor_describe(wte, s1, sizeof s1), tensor_describe(x, s2, sizeof s2));
  }
  if (wpe) {
    TRY(tensor_check(ctx, fn, "wpe", wpe, TENSOR_F32, 2, 2));
    TRY(tensor_check_device(ctx, fn, "wpe", wpe, x->device));
    CHECK(wpe->shape[0] >= *T && wpe->shape[1] == *C, STRATA_ESHAPE,
          "%s: wpe %s must be (>= %d, %d) for out %s (ids %s)", fn,
          tensor_describe(wpe, s1, sizeof s1), *T, *C, tensor_describe(x, s2, sizeof s2),
          tensor_describe(ids, s3, sizeof s3));
  }
  if (x->device == TENSOR_CPU && wte) {
    const int32_t *id = ids->data;
    for (int64_t i = 0; i < (int64_t)*B * *T; i++)
      CHECK(id[i] >= 0 && (slice || id[i] < *V), STRATA_EINVAL, "%s: ids[%lld] = %d outside [0, %d)", fn,
            (long long)i, id[i], slice ? INT32_MAX : *V);
  }
fail:
  return rc;
}

static int emb_forward(tensor_ctx_t *ctx, const char *fn, tensor_t *out, const tensor_t *ids,
                       const tensor_t *wte, const tensor_t *wpe, int64_t lo, int slice) {
  int rc = STRATA_OK, B, T, C, V;
  if (!ctx) return STRATA_EINVAL;
  CHECK(wte, STRATA_EINVAL, "%s: wte is NULL", fn);
  CHECK(lo >= 0, STRATA_EINVAL, "%s: vocab_lo %lld < 0", fn, (long long)lo);
  TRY(check_emb(ctx, fn, out, ids, wte, wpe, &B, &T, &C, &V, slice));
  if (out->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_embedding_forward(ctx, out->data, (int)out->dtype, ids->data, wte->data, wpe ? wpe->data : NULL, B, T, C, V, lo, slice));
#endif
    goto fail;
  }
  float *o = out->data;
  const float *e = wte->data, *p = wpe ? wpe->data : NULL;
  const int32_t *id = ids->data;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if ((int64_t)B * T * C > 32768)
  for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
    float *orow = o + bt * C;
    int64_t local = (int64_t)id[bt] - lo;
    if (local < 0 || local >= V) { /* another rank's token: its position only */
      if (p) memcpy(orow, p + (bt % T) * C, (size_t)C * sizeof(float));
      else memset(orow, 0, (size_t)C * sizeof(float));
      continue;
    }
    const float *er = e + local * C;
    if (p) {
      const float *pr = p + (bt % T) * C;
#pragma omp simd
      for (int i = 0; i < C; i++) orow[i] = er[i] + pr[i];
    } else {
      memcpy(orow, er, (size_t)C * sizeof(float));
    }
  }
fail:
  return rc;
}

int tensor_embedding_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *ids,
                             const tensor_t *wte, const tensor_t *wpe) {
  return emb_forward(ctx, "tensor_embedding_forward", out, ids, wte, wpe, 0, 0);
}

int tensor_embedding_slice_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *ids, const tensor_t *wte,
                                   const tensor_t *wpe, int64_t vocab_lo) {
  return emb_forward(ctx, "tensor_embedding_slice_forward", out, ids, wte, wpe, vocab_lo, 1);
}

static int emb_backward(tensor_ctx_t *ctx, const char *fn, tensor_t *dwte, tensor_t *dwpe, const tensor_t *dout,
                        const tensor_t *ids, int64_t lo, int slice) {
  int rc = STRATA_OK, B, T, C, V;
  if (!ctx) return STRATA_EINVAL;
  CHECK(lo >= 0, STRATA_EINVAL, "%s: vocab_lo %lld < 0", fn, (long long)lo);
  TRY(check_emb(ctx, fn, dout, ids, dwte, dwpe, &B, &T, &C, &V, slice));
  if (dout->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_embedding_backward(ctx, dwte ? dwte->data : NULL, dwpe ? dwpe->data : NULL, dout->data, (int)dout->dtype,
                               ids->data, B, T, C, V, lo));
#endif
    goto fail;
  }
  const float *g = dout->data;
  const int32_t *id = ids->data;
  /* Threads own column blocks, so repeated ids never race. */
  int nblk = (C + 31) / 32;
  float *de = dwte ? dwte->data : NULL, *dp = dwpe ? dwpe->data : NULL;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if ((int64_t)B * T * C > 32768)
  for (int blk = 0; blk < nblk; blk++) {
    int c0 = blk * 32, c1 = c0 + 32 < C ? c0 + 32 : C;
    for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
      const float *gr = g + bt * C;
      int64_t local = (int64_t)id[bt] - lo;
      if (de && local >= 0 && local < V) {
        float *er = de + local * C;
        for (int i = c0; i < c1; i++) er[i] += gr[i];
      }
      if (dp) {
        float *pr = dp + (bt % T) * C;
        for (int i = c0; i < c1; i++) pr[i] += gr[i];
      }
    }
  }
fail:
  return rc;
}

int tensor_embedding_backward(tensor_ctx_t *ctx, tensor_t *dwte, tensor_t *dwpe, const tensor_t *dout,
                              const tensor_t *ids) {
  return emb_backward(ctx, "tensor_embedding_backward", dwte, dwpe, dout, ids, 0, 0);
}

int tensor_embedding_slice_backward(tensor_ctx_t *ctx, tensor_t *dwte, tensor_t *dwpe, const tensor_t *dout,
                                    const tensor_t *ids, int64_t vocab_lo) {
  return emb_backward(ctx, "tensor_embedding_slice_backward", dwte, dwpe, dout, ids, vocab_lo, 1);
}
