/* tensor_copy_columns on CUDA: one thread per element of the block. */
#include "common.cuh"

__global__ void k_copy_columns(float *dst, int64_t Wd, int64_t d0, const float *src, int64_t Ws, int64_t s0,
                               int64_t n, int64_t rows, int accumulate) {
  int64_t total = rows * n;
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = x / n, c = x % n;
    float v = src[r * Ws + s0 + c];
    if (accumulate) dst[r * Wd + d0 + c] += v;
    else dst[r * Wd + d0 + c] = v;
  }
}

extern "C" int tcu_copy_columns(tensor_ctx_t *ctx, float *dst, int64_t Wd, int64_t d0, const float *src, int64_t Ws,
                                int64_t s0, int64_t n, int64_t rows, int accumulate) {
  k_copy_columns<<<blocks_for(rows * n, 256), 256>>>(dst, Wd, d0, src, Ws, s0, n, rows, accumulate);
  LAUNCHED();
  return STRATA_OK;
}
