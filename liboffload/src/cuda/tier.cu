// liboffload's CUDA device tier: the arena in device memory, host chunks in
// pinned memory, and the copies between them queued on the manager's own
// stream (cudaMemcpyAsync), so that a prefetch overlaps the caller's work;
// offload.c synchronises the stream before the host touches a chunk or an
// access returns. Plain C entry points (internal.h).
#include <cuda_runtime.h>
#include <stdio.h>

#include <strata/status.h>

#include "internal.h"

static int fail(cudaError_t e, const char *what, char *err, size_t n) {
  if (err && n) snprintf(err, n, "%s: %s", what, cudaGetErrorString(e));
  return STRATA_ECUDA;
}

int offload_cuda_open(int device, size_t arena_bytes, void **arena, void **stream, char *err, size_t n) {
  cudaError_t e;
  int count = 0;
  *arena = NULL, *stream = NULL;
  if ((e = cudaGetDeviceCount(&count)) != cudaSuccess || device >= count) {
    if (err && n)
      snprintf(err, n, "CUDA device %d: %s", device,
               e != cudaSuccess ? cudaGetErrorString(e) : "this machine has fewer devices");
    return STRATA_ECUDA;
  }
  if ((e = cudaSetDevice(device)) != cudaSuccess) return fail(e, "cudaSetDevice", err, n);
  cudaStream_t s;
  if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
    return fail(e, "cudaStreamCreate", err, n);
  if (arena_bytes && (e = cudaMalloc(arena, arena_bytes)) != cudaSuccess) {
    cudaStreamDestroy(s);
    *arena = NULL;
    if (err && n) snprintf(err, n, "the device tier's arena of %zu bytes: %s", arena_bytes, cudaGetErrorString(e));
    return STRATA_ENOMEM;
  }
  *stream = s;
  return STRATA_OK;
}

void offload_cuda_close(void *arena, void *stream) {
  if (stream) cudaStreamSynchronize((cudaStream_t)stream), cudaStreamDestroy((cudaStream_t)stream);
  if (arena) cudaFree(arena);
}

int offload_cuda_host_alloc(void **p, size_t bytes) {
  return cudaHostAlloc(p, bytes, cudaHostAllocDefault) == cudaSuccess ? STRATA_OK : STRATA_ENOMEM;
}

void offload_cuda_host_free(void *p) { cudaFreeHost(p); }

int offload_cuda_copy(void *dst, const void *src, size_t bytes, void *stream, char *err, size_t n) {
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream);
  return e == cudaSuccess ? STRATA_OK : fail(e, "cudaMemcpyAsync", err, n);
}

int offload_cuda_zero(void *p, size_t bytes, void *stream, char *err, size_t n) {
  cudaError_t e = cudaMemsetAsync(p, 0, bytes, (cudaStream_t)stream);
  return e == cudaSuccess ? STRATA_OK : fail(e, "cudaMemsetAsync", err, n);
}

int offload_cuda_sync(void *stream, char *err, size_t n) {
  cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
  return e == cudaSuccess ? STRATA_OK : fail(e, "cudaStreamSynchronize", err, n);
}
