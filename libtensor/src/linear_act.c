/* A linear layer fused with its activation (tensor_linear_act_*): on the
 * CPU the separate ops in sequence, which define the results; on CUDA
 * cuBLASLt's epilogues where they apply (gemm_lt.cu), else the same
 * separate ops. */
#include "tensor_internal.h"

static int check_act(tensor_ctx_t *ctx, const char *fn, tensor_act_t act) {
  if (act != TENSOR_ACT_NONE && act != TENSOR_ACT_GELU)
    return tensor_seterr(ctx, STRATA_EINVAL, "%s: unknown activation %d", fn, (int)act);
  return STRATA_OK;
}

/* t is a tensor of like's dtype (f32, or bf16/f16 on CUDA), shape and device. */
static int check_like(tensor_ctx_t *ctx, const char *fn, const char *what, const tensor_t *t,
                      const tensor_t *like, const char *like_name) {
  int rc = STRATA_OK;
  char s1[96], s2[96];
  TRY(tensor_check_act(ctx, fn, what, t, tensor_act_dtype(like), 1, 4));
  TRY(tensor_check_device(ctx, fn, what, t, like->device));
  CHECK(tensor_same_shape(t, like), STRATA_ESHAPE, "%s: %s %s must have %s's shape %s", fn, what,
        tensor_describe(t, s1, sizeof s1), like_name, tensor_describe(like, s2, sizeof s2));
fail:
  return rc;
}

int tensor_linear_act_forward(tensor_ctx_t *ctx, tensor_t *out, tensor_t *pre, const tensor_t *in,
                              const tensor_t *weight, const tensor_t *bias, tensor_act_t act) {
  int rc = STRATA_OK, N = 0, K = 0;
  int64_t rows = 0;
  const char *fn = "tensor_linear_act_forward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_act(ctx, fn, act));
  if (act == TENSOR_ACT_NONE) return tensor_linear_forward(ctx, out, in, weight, bias);
  TRY(tensor_linear_check(ctx, fn, out, in, weight, bias, &rows, &N, &K));
  TRY(check_like(ctx, fn, "pre", pre, out, "out"));
  CHECK(pre->data != out->data, STRATA_EINVAL, "%s: pre and out must not alias", fn);
  /* cuBLASLt's epilogue, out and pre of out's dtype (f32 or in's 16-bit one) */
  if (out->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    rc = tcu_linear_lt(ctx, out->data, pre->data, (int)out->dtype, in->data, (int)in->dtype, weight->data,
                       (int)weight->dtype, bias ? bias->data : NULL, rows, N, K, 1);
    if (rc != STRATA_EUNSUPPORTED) goto fail;
    rc = STRATA_OK;
#endif
  }
  TRY(tensor_linear_forward(ctx, pre, in, weight, bias));
  TRY(tensor_gelu_forward(ctx, out, pre));
fail:
  return rc;
}

int tensor_linear_act_backward(tensor_ctx_t *ctx, tensor_t *din_pre, tensor_t *dact, tensor_t *dweight,
                               tensor_t *dbias, const tensor_t *dout, const tensor_t *in,
                               const tensor_t *weight, const tensor_t *in_pre, tensor_act_t act) {
  int rc = STRATA_OK;
  const char *fn = "tensor_linear_act_backward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_act(ctx, fn, act));
  if (act == TENSOR_ACT_NONE) return tensor_linear_backward(ctx, din_pre, dweight, dbias, dout, in, weight);
  /* The weight and bias gradients first: it checks dout, in and weight, and
   * they do not depend on the input's gradient. */
  TRY(tensor_linear_backward(ctx, NULL, dweight, dbias, dout, in, weight));
  if (!din_pre) goto fail;
  TRY(check_like(ctx, fn, "din_pre", din_pre, in, "in"));
  TRY(check_like(ctx, fn, "dact", dact, in, "in"));
  TRY(check_like(ctx, fn, "in_pre", in_pre, in, "in"));
  if (dout->device != TENSOR_CPU) { /* dact, din_pre, in_pre of in's (and dout's) dtype */
#if defined(STRATA_CUDA)
    int K = (int)in->shape[in->ndim - 1], N = (int)dout->shape[dout->ndim - 1];
    int64_t rows = tensor_numel(in) / K;
    rc = tcu_linear_dgelu_lt(ctx, dact->data, dout->data, (int)dout->dtype, weight->data, (int)weight->dtype,
                             in_pre->data, rows, N, K);
    if (rc == STRATA_OK) rc = tcu_acc(ctx, din_pre->data, dact->data, (int)dout->dtype, rows * K);
    if (rc != STRATA_EUNSUPPORTED) goto fail;
    rc = STRATA_OK;
#endif
  }
  TRY(tensor_zero(ctx, dact));
  TRY(tensor_linear_backward(ctx, dact, NULL, NULL, dout, in, weight));
  TRY(tensor_gelu_backward(ctx, din_pre, dact, in_pre));
fail:
  return rc;
}
