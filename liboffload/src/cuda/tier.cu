// liboffload's CUDA device tier: the arena in device memory, host chunks in
// pinned memory, and the copies between them queued on the manager's own
// stream (cudaMemcpyAsync), so that a prefetch overlaps the caller's work;
// offload.c synchronises the stream before the host touches a chunk or an
// access returns. Each copy (and zeroing) first waits for the work queued
// on the legacy default stream before it, where the caller's kernels run:
// a chunk moved off the device holds what they wrote, and a slot reused
// for another chunk is no longer read by them. Plain C entry points
// (internal.h); `stream` is a tier_stream_t.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <strata/status.h>

#include "internal.h"

static int fail(cudaError_t e, const char *what, char *err, size_t n) {
  if (err && n) snprintf(err, n, "%s: %s", what, cudaGetErrorString(e));
  return STRATA_ECUDA;
}

typedef struct {
  cudaStream_t s;
  cudaEvent_t ready; /* recorded on the legacy stream before each copy */
} tier_stream_t;

/* Orders what is queued on t next after the legacy stream's work so far. */
static cudaError_t after_caller(tier_stream_t *t) {
  cudaError_t e = cudaEventRecord(t->ready, cudaStreamLegacy);
  return e == cudaSuccess ? cudaStreamWaitEvent(t->s, t->ready, 0) : e;
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
  tier_stream_t *t = (tier_stream_t *)calloc(1, sizeof *t);
  if (!t) return STRATA_ENOMEM;
  if ((e = cudaStreamCreateWithFlags(&t->s, cudaStreamNonBlocking)) != cudaSuccess) {
    free(t);
    return fail(e, "cudaStreamCreate", err, n);
  }
  if ((e = cudaEventCreateWithFlags(&t->ready, cudaEventDisableTiming)) != cudaSuccess) {
    cudaStreamDestroy(t->s);
    free(t);
    return fail(e, "cudaEventCreate", err, n);
  }
  if (arena_bytes && (e = cudaMalloc(arena, arena_bytes)) != cudaSuccess) {
    cudaEventDestroy(t->ready), cudaStreamDestroy(t->s);
    free(t);
    *arena = NULL;
    if (err && n) snprintf(err, n, "the device tier's arena of %zu bytes: %s", arena_bytes, cudaGetErrorString(e));
    return STRATA_ENOMEM;
  }
  *stream = t;
  return STRATA_OK;
}

void offload_cuda_close(void *arena, void *stream) {
  tier_stream_t *t = (tier_stream_t *)stream;
  if (t) cudaStreamSynchronize(t->s), cudaEventDestroy(t->ready), cudaStreamDestroy(t->s), free(t);
  if (arena) cudaFree(arena);
}

int offload_cuda_host_alloc(void **p, size_t bytes) {
  return cudaHostAlloc(p, bytes, cudaHostAllocDefault) == cudaSuccess ? STRATA_OK : STRATA_ENOMEM;
}

void offload_cuda_host_free(void *p) { cudaFreeHost(p); }

int offload_cuda_copy(void *dst, const void *src, size_t bytes, void *stream, char *err, size_t n) {
  tier_stream_t *t = (tier_stream_t *)stream;
  cudaError_t e = after_caller(t);
  if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, t->s);
  return e == cudaSuccess ? STRATA_OK : fail(e, "cudaMemcpyAsync", err, n);
}

int offload_cuda_zero(void *p, size_t bytes, void *stream, char *err, size_t n) {
  tier_stream_t *t = (tier_stream_t *)stream;
  cudaError_t e = after_caller(t);
  if (e == cudaSuccess) e = cudaMemsetAsync(p, 0, bytes, t->s);
  return e == cudaSuccess ? STRATA_OK : fail(e, "cudaMemsetAsync", err, n);
}

int offload_cuda_sync(void *stream, char *err, size_t n) {
  cudaError_t e = cudaStreamSynchronize(((tier_stream_t *)stream)->s);
  return e == cudaSuccess ? STRATA_OK : fail(e, "cudaStreamSynchronize", err, n);
}
