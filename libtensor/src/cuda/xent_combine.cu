/* CUDA twin of tensor_xent_slice_combine (xent_combine.c): one thread per
 * row, the same arithmetic (the maximum in float, the sum of t exponentials
 * in double), reading the t parts of a row R apart (coalesced over rows). */
#include "common.cuh"

__global__ void k_xent_combine(float *lse, float *losses, const float *parts, const float *zt,
                               const int32_t *targets, int64_t t, int64_t R) {
  int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  float mx = -INFINITY;
  for (int64_t s = 0; s < t; s++) mx = fmaxf(mx, parts[s * R + r]);
  double sum = 0;
  for (int64_t s = 0; s < t; s++) sum += exp((double)parts[s * R + r] - (double)mx);
  float v = mx + (float)log(sum);
  float z = zt[r];
  losses[r] = targets[r] >= 0 ? v - z : 0.f;
  lse[r] = v;
}

extern "C" int tcu_xent_slice_combine(tensor_ctx_t *ctx, float *lse, float *losses, const float *parts,
                                      const float *zt, const int32_t *targets, int64_t t, int64_t R) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  if (R > 0) k_xent_combine<<<blocks_for(R, 256), 256>>>(lse, losses, parts, zt, targets, t, R);
  CU(cudaGetLastError());
  return STRATA_OK;
}
