/* The fused classifier: a language model's head (logits = h W^T) and its
 * softmax cross-entropy, forward and backward, over chunks of rows so that
 * the (rows, V) logits never exist at once (llm.c's fused classifier keeps
 * them once and overwrites them with their gradient; here only a chunk's
 * are kept).
 *
 * The default chunk: 256 MiB of f32 logits (1335 rows at V = 50257). The
 * chunk's weight-gradient GEMM dW += dlogits^T h_c reads and writes the
 * whole f32 dW (8 V C bytes) for 2 V C rows FLOPs: at an H100's ~790
 * TFLOP/s bf16 and ~3 TB/s that is compute-bound only from ~1000 rows on,
 * so much smaller chunks (64 MiB: 333 rows) would spend more time moving
 * dW than multiplying; 256 MiB keeps that traffic to a few per cent of the
 * head's GEMMs while holding 1/6 of the logits of a GPT-2 batch of 8 x 1024
 * tokens. */
#include "tensor_internal.h"

static int64_t default_chunk(int64_t rows, int64_t V) {
  int64_t c = TENSOR_CLASSIFIER_CHUNK_BYTES / ((int64_t)sizeof(float) * V);
  if (c < 1) c = 1;
  return c < rows ? c : rows;
}

static int check_classifier(tensor_ctx_t *ctx, const char *fn, const tensor_t *losses,
                            const tensor_t *lse, const tensor_t *dh, const tensor_t *dw,
                            const tensor_t *h, const tensor_t *w, const tensor_t *targets,
                            int64_t *rows, int *C, int *V) {
  int rc = STRATA_OK;
  char s1[96], s2[96];
  TRY(tensor_check_act(ctx, fn, "h", h, tensor_act_dtype(h), 1, 4));
  TRY(tensor_check(ctx, fn, "weight", w, TENSOR_F32, 2, 2));
  TRY(tensor_check(ctx, fn, "targets", targets, TENSOR_I32, 1, 4));
  TRY(tensor_check(ctx, fn, "lse", lse, TENSOR_F32, 1, 4));
  TRY(tensor_check_device(ctx, fn, "weight", w, h->device));
  TRY(tensor_check_device(ctx, fn, "targets", targets, h->device));
  TRY(tensor_check_device(ctx, fn, "lse", lse, h->device));
  *C = (int)h->shape[h->ndim - 1];
  *rows = tensor_numel(h) / *C;
  *V = (int)w->shape[0];
  CHECK(w->shape[1] == *C, STRATA_ESHAPE, "%s: weight %s for h %s (need (V, C))", fn,
        tensor_describe(w, s1, sizeof s1), tensor_describe(h, s2, sizeof s2));
  CHECK(tensor_numel(targets) == *rows && tensor_numel(lse) == *rows, STRATA_ESHAPE,
        "%s: targets %s and lse need one entry per row of h %s", fn,
        tensor_describe(targets, s1, sizeof s1), tensor_describe(h, s2, sizeof s2));
  if (losses) {
    TRY(tensor_check(ctx, fn, "losses", losses, TENSOR_F32, 1, 4));
    TRY(tensor_check_device(ctx, fn, "losses", losses, h->device));
    CHECK(tensor_numel(losses) == *rows, STRATA_ESHAPE, "%s: losses %s for h %s", fn,
          tensor_describe(losses, s1, sizeof s1), tensor_describe(h, s2, sizeof s2));
  }
  if (dh) {
    TRY(tensor_check_act(ctx, fn, "dh", dh, h->dtype, 1, 4));
    TRY(tensor_check_device(ctx, fn, "dh", dh, h->device));
    CHECK(tensor_same_shape(dh, h), STRATA_ESHAPE, "%s: dh %s != h %s", fn,
          tensor_describe(dh, s1, sizeof s1), tensor_describe(h, s2, sizeof s2));
  }
  if (dw) {
    TRY(tensor_check(ctx, fn, "dweight", dw, TENSOR_F32, 2, 2));
    TRY(tensor_check_device(ctx, fn, "dweight", dw, h->device));
    CHECK(tensor_same_shape(dw, w), STRATA_ESHAPE, "%s: dweight %s != weight %s", fn,
          tensor_describe(dw, s1, sizeof s1), tensor_describe(w, s2, sizeof s2));
  }
  if (h->device == TENSOR_CPU) {
    const int32_t *t = targets->data;
    for (int64_t i = 0; i < *rows; i++)
      CHECK(t[i] < *V, STRATA_EINVAL, "%s: targets[%lld] = %d >= V = %d", fn, (long long)i, t[i],
            *V);
  }
fail:
  return rc;
}

/* The CPU: the separate ops on each chunk (which define the results). */
static int classifier_cpu(tensor_ctx_t *ctx, tensor_t *losses, tensor_t *lse, tensor_t *dh,
                          tensor_t *dw, const tensor_t *h, const tensor_t *w,
                          const tensor_t *targets, float dloss, int64_t rows, int C, int V,
                          int64_t chunk) {
  int rc = STRATA_OK, bwd = dh || dw;
  tensor_t z = {0}, dz = {0}, lo = {0};
  int64_t zs[2] = {chunk, V};
  TRY(tensor_alloc(ctx, &z, TENSOR_F32, TENSOR_CPU, 2, zs));
  if (bwd) TRY(tensor_alloc(ctx, &dz, TENSOR_F32, TENSOR_CPU, 2, zs));
  if (!losses) TRY(tensor_alloc(ctx, &lo, TENSOR_F32, TENSOR_CPU, 1, &chunk));
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    int64_t n = rows - r0 < chunk ? rows - r0 : chunk;
    tensor_t hc = tensor_view2((float *)h->data + r0 * C, TENSOR_F32, TENSOR_CPU, n, C);
    tensor_t zc = tensor_view2(z.data, TENSOR_F32, TENSOR_CPU, n, V);
    tensor_t tc = tensor_view1((int32_t *)targets->data + r0, TENSOR_I32, TENSOR_CPU, n);
    tensor_t lc = tensor_view1((float *)lse->data + r0, TENSOR_F32, TENSOR_CPU, n);
    tensor_t oc =
        tensor_view1(losses ? (float *)losses->data + r0 : lo.data, TENSOR_F32, TENSOR_CPU, n);
    TRY(tensor_linear_forward(ctx, &zc, &hc, w, NULL));
    TRY(tensor_xent_forward(ctx, &oc, &lc, &zc, &tc));
    if (!bwd) continue;
    tensor_t dzc = tensor_view2(dz.data, TENSOR_F32, TENSOR_CPU, n, V);
    tensor_t dhc =
        tensor_view2(dh ? (float *)dh->data + r0 * C : NULL, TENSOR_F32, TENSOR_CPU, n, C);
    TRY(tensor_zero(ctx, &dzc));
    TRY(tensor_xent_backward(ctx, &dzc, &zc, &lc, &tc, dloss));
    TRY(tensor_linear_backward(ctx, dh ? &dhc : NULL, dw, NULL, &dzc, &hc, w));
  }
fail:
  tensor_free(ctx, &z), tensor_free(ctx, &dz), tensor_free(ctx, &lo);
  return rc;
}

#if defined(STRATA_CUDA)
/* CUDA: per chunk one GEMM into the chunk's logits, one kernel (lse, loss,
 * dlogits over the logits, or into a 16-bit buffer), two GEMMs. On bf16
 * contexts h and W are rounded to bf16 once, so the GEMMs take bf16
 * operands as they are; 16-bit h (bf16 or f16 activations) is used as it
 * is, with W rounded to its dtype once and dh written in it. */
static int classifier_cuda(tensor_ctx_t *ctx, tensor_t *losses, tensor_t *lse, tensor_t *dh,
                           tensor_t *dw, const tensor_t *h, const tensor_t *w,
                           const tensor_t *targets, float dloss, int64_t rows, int C, int V,
                           int64_t chunk) {
  int rc = STRATA_OK, bwd = dh || dw, dev = h->device, act16 = h->dtype != TENSOR_F32;
  int bf = act16 || tensor_ctx_bf16_matmul(ctx);
  tensor_t z = {0}, dz16 = {0}, h16 = {0}, w16 = {0};
  int64_t zs[2] = {chunk, V}, hs[2] = {rows, C}, ws[2] = {V, C};
  const void *hp = h->data, *wp = w->data;
  int dt = TENSOR_F32;
  TRY(tensor_alloc(ctx, &z, TENSOR_F32, dev, 2, zs));
  if (bf) {
    dt = act16 ? (int)h->dtype : TENSOR_BF16;
    if (!act16) {
      TRY(tensor_alloc(ctx, &h16, TENSOR_BF16, dev, 2, hs));
      TRY(tcu_cast(ctx, h16.data, TENSOR_BF16, h->data, TENSOR_F32, rows * C));
      hp = h16.data;
    }
    TRY(tensor_alloc(ctx, &w16, (tensor_dtype_t)dt, dev, 2, ws));
    TRY(tcu_cast(ctx, w16.data, dt, w->data, TENSOR_F32, (int64_t)V * C));
    if (bwd) TRY(tensor_alloc(ctx, &dz16, (tensor_dtype_t)dt, dev, 2, zs));
    wp = w16.data;
  }
  size_t es = bf ? 2 : 4;
  /* the gradient of the logits: over them (f32) or beside them (bf16) */
  void *dzp = bf ? dz16.data : z.data;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    int n = (int)(rows - r0 < chunk ? rows - r0 : chunk);
    const char *hc = (const char *)hp + (size_t)r0 * C * es;
    TRY(tcu_gemm(ctx, 0, 1, n, V, C, 1.f, hc, dt, C, 0, wp, dt, C, 0, 0.f, z.data, TENSOR_F32, V, 0, 1));
    TRY(tcu_classifier_rows(ctx, losses ? (float *)losses->data + r0 : NULL,
                            (float *)lse->data + r0, bwd ? dzp : NULL, dt, z.data,
                            (const int32_t *)targets->data + r0, n, V, dloss));
    if (!bwd) continue;
    if (dh) /* dh, of h's dtype, += dlogits W */
      TRY(tcu_gemm(ctx, 0, 0, n, C, V, 1.f, dzp, dt, V, 0, wp, dt, C, 0, 1.f,
                   (char *)dh->data + (size_t)r0 * C * tensor_dtype_size(h->dtype), (int)h->dtype, C, 0, 1));
    if (dw)
      TRY(tcu_gemm(ctx, 1, 0, V, C, n, 1.f, dzp, dt, V, 0, hc, dt, C, 0, 1.f, dw->data, TENSOR_F32, C, 0,
                   1));
  }
  TRY(tcu_classifier_check(ctx, V));
fail:
  tensor_free(ctx, &z), tensor_free(ctx, &dz16), tensor_free(ctx, &h16), tensor_free(ctx, &w16);
  return rc;
}
#endif

int tensor_classifier_xent(tensor_ctx_t *ctx, tensor_t *losses, tensor_t *lse, tensor_t *dh,
                           tensor_t *dweight, const tensor_t *h, const tensor_t *weight,
                           const tensor_t *targets, float dloss, int64_t chunk_rows) {
  int rc = STRATA_OK, C = 0, V = 0;
  int64_t rows = 0;
  const char *fn = "tensor_classifier_xent";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_classifier(ctx, fn, losses, lse, dh, dweight, h, weight, targets, &rows, &C, &V));
  if (rows == 0) goto fail;
  int64_t chunk = chunk_rows > 0 ? (chunk_rows < rows ? chunk_rows : rows) : default_chunk(rows, V);
  if (h->device == TENSOR_CPU) {
    rc =
        classifier_cpu(ctx, losses, lse, dh, dweight, h, weight, targets, dloss, rows, C, V, chunk);
    goto fail;
  }
#if defined(STRATA_CUDA)
  CHECK(rows * (int64_t)C < ((int64_t)1 << 31) && (int64_t)V * C < ((int64_t)1 << 31),
        STRATA_EUNSUPPORTED, "%s: %lld rows x %d and V %d x %d exceed the GEMMs' 32-bit sizes", fn,
        (long long)rows, C, V, C);
  rc = classifier_cuda(ctx, losses, lse, dh, dweight, h, weight, targets, dloss, rows, C, V, chunk);
#else
  rc = tensor_seterr(ctx, STRATA_EUNSUPPORTED, "%s: a CUDA tensor in a build without CUDA", fn);
#endif
fail:
  return rc;
}
