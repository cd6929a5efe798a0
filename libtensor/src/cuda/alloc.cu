/* The CUDA backend of libtensor's device memory pool (devpool.h): segments
 * from cudaMalloc, given back with cudaFree. */
#include "common.cuh"

extern "C" int tcu_reserve(tensor_ctx_t *ctx, int device, void **p, size_t bytes) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return tensor_seterr(ctx, STRATA_EUNSUPPORTED, "cuda:%d requested but no CUDA device is usable: %s",
                         device, cudaGetErrorString(e));
  }
  if (n <= device)
    return tensor_seterr(ctx, STRATA_EUNSUPPORTED, "cuda:%d requested but %d CUDA devices are present",
                         device, n);
  CU(cudaSetDevice(device));
  e = cudaMalloc(p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError(); /* not sticky: clear it, or the next launch check would report it */
    *p = NULL;
    return tensor_seterr(ctx, STRATA_ENOMEM, "cudaMalloc of %zu bytes on cuda:%d: %s", bytes, device,
                         cudaGetErrorString(e));
  }
  CU(e);
  return STRATA_OK;
}

extern "C" void tcu_release(int device, void *p) {
  cudaSetDevice(device);
  cudaFree(p);
}
