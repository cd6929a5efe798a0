/* The last step of the vocabulary-parallel cross-entropy (Megatron-LM,
 * Shoeybi et al., arXiv 1909.08053, sec. 3): each rank of a tensor group
 * has the log-sum-exp of its vocabulary slice of every row; gathered, they
 * combine into the row's log-sum-exp, log sum_s exp(lse_s) = m + log sum_s
 * exp(lse_s - m) with m their maximum (summed in double: t terms), and
 * with the target's logit summed over the group, into the loss. A twin of
 * its own (not xent.c) because the model runs it between two collectives. */
#include <math.h>

#include "tensor_internal.h"

int tensor_xent_slice_combine(tensor_ctx_t *ctx, tensor_t *lse, tensor_t *losses, const tensor_t *parts,
                              const tensor_t *zt, const tensor_t *targets) {
  int rc = STRATA_OK;
  char s1[96], s2[96];
  const char *fn = "tensor_xent_slice_combine";
  if (!ctx) return STRATA_EINVAL;
  TRY(tensor_check(ctx, fn, "parts", parts, TENSOR_F32, 2, 2));
  TRY(tensor_check(ctx, fn, "lse", lse, TENSOR_F32, 1, 4));
  TRY(tensor_check(ctx, fn, "losses", losses, TENSOR_F32, 1, 4));
  TRY(tensor_check(ctx, fn, "zt", zt, TENSOR_F32, 1, 4));
  TRY(tensor_check(ctx, fn, "targets", targets, TENSOR_I32, 1, 4));
  int dev = parts->device;
  TRY(tensor_check_device(ctx, fn, "lse", lse, dev));
  TRY(tensor_check_device(ctx, fn, "losses", losses, dev));
  TRY(tensor_check_device(ctx, fn, "zt", zt, dev));
  TRY(tensor_check_device(ctx, fn, "targets", targets, dev));
  int64_t t = parts->shape[0], R = parts->shape[1];
  CHECK(tensor_numel(lse) == R && tensor_numel(losses) == R && tensor_numel(zt) == R && tensor_numel(targets) == R,
        STRATA_ESHAPE, "%s: lse, losses, zt and targets need one entry per column of parts %s (lse %s)", fn,
        tensor_describe(parts, s1, sizeof s1), tensor_describe(lse, s2, sizeof s2));
  if (dev != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_xent_slice_combine(ctx, lse->data, losses->data, parts->data, zt->data, targets->data, t, R));
#endif
    goto fail;
  }
  const float *p = parts->data, *z = zt->data;
  const int32_t *tg = targets->data;
  float *ls = lse->data, *l = losses->data;
  for (int64_t r = 0; r < R; r++) { /* (losses may be zt: each row read before it is written) */
    float mx = -INFINITY;
    for (int64_t s = 0; s < t; s++) mx = fmaxf(mx, p[s * R + r]);
    double sum = 0;
    for (int64_t s = 0; s < t; s++) sum += exp((double)p[s * R + r] - mx);
    float v = mx + (float)log(sum);
    l[r] = tg[r] >= 0 ? v - z[r] : 0.f;
    ls[r] = v;
  }
fail:
  return rc;
}
