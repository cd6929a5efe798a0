/* Device memory of a context: one caching pool per CUDA device (devpool.h)
 * over cudaMalloc/cudaFree, and the statistics that go with it. */
#include <stdio.h>
#include <string.h>

#include "tensor_internal.h"

#if defined(STRATA_CUDA)
static int seg_reserve(void *user, void **p, size_t bytes) {
  tensor_devmem_t *d = user;
  return tcu_reserve(d->ctx, d->device, p, bytes);
}
static void seg_release(void *user, void *p, size_t bytes) {
  tensor_devmem_t *d = user;
  (void)bytes;
  tcu_release(d->device, p);
}
#endif

int tensor_device_alloc(tensor_ctx_t *ctx, void **p, size_t bytes, int device) {
  int rc = STRATA_OK;
  *p = NULL;
#if defined(STRATA_CUDA)
  tensor_devmem_t *d = &ctx->devmem[device];
  CHECK(ctx->cuda_alloc >= 0, STRATA_EINVAL, "STRATA_CUDA_ALLOC=%s: expected cache or direct",
        ctx->cuda_alloc_env);
  if (!d->pool) {
    tpool_backend_t be = {seg_reserve, seg_release, d};
    d->ctx = ctx, d->device = device;
    CHECK(tpool_create(&d->pool, &be, ctx->cuda_alloc == TENSOR_CUDA_ALLOC_CACHE) == STRATA_OK,
          STRATA_ENOMEM, "tensor_alloc: the memory pool of cuda:%d", device);
  }
  rc = tpool_alloc(d->pool, p, bytes);
  if (rc == STRATA_ENOMEM) { /* say what the pool held: a full device or a fragmented cache */
    char cuda[256];
    tpool_stats_t st;
    tpool_stats(d->pool, &st);
    snprintf(cuda, sizeof cuda, "%s", tensor_last_error(ctx));
    rc = tensor_seterr(ctx, STRATA_ENOMEM,
                       "tensor_alloc: %zu bytes on cuda:%d (tensors hold %zu bytes, the pool %zu "
                       "more, %zu of them free after releasing its cache): %s",
                       bytes, device, st.allocated, st.reserved - st.allocated, st.cached, cuda);
  }
#else
  CHECK(0, STRATA_EUNSUPPORTED, "tensor_alloc: cuda:%d requested but strata was built without CUDA", device);
#endif
fail:
  return rc;
}

void tensor_device_free(tensor_ctx_t *ctx, void *p, int device) {
  tpool_t *pool = ctx->devmem[device].pool;
  if (pool) tpool_free(pool, p);
}

void tensor_device_pools_destroy(tensor_ctx_t *ctx) {
  for (int i = 0; i < TENSOR_MAX_DEVICES; i++) {
    tpool_destroy(ctx->devmem[i].pool);
    ctx->devmem[i].pool = NULL;
  }
}

void tensor_device_reset_peak(tensor_ctx_t *ctx, int device) {
  if (device >= 0 && ctx->devmem[device].pool) tpool_reset_peak(ctx->devmem[device].pool);
}

int tensor_memory_stats(const tensor_ctx_t *ctx, int device, tensor_memory_stats_t *out) {
  if (!ctx || !out || device < TENSOR_CPU || device >= TENSOR_MAX_DEVICES) return STRATA_EINVAL;
  memset(out, 0, sizeof *out);
  tensor_memory(ctx, device, &out->allocated, &out->allocated_peak);
  if (device == TENSOR_CPU) { /* malloc'd per tensor: what tensors hold is what is reserved */
    out->reserved = out->allocated, out->reserved_peak = out->allocated_peak;
    return STRATA_OK;
  }
  tpool_t *pool = ctx->devmem[device].pool;
  if (pool) {
    tpool_stats_t st;
    tpool_stats(pool, &st);
    out->reserved = st.reserved, out->reserved_peak = st.reserved_peak;
    out->cached = st.cached, out->segments = st.segments, out->retries = st.retries;
    out->cuda_mallocs = st.reserves, out->cuda_frees = st.releases;
  }
  return STRATA_OK;
}

int tensor_memory_empty_cache(tensor_ctx_t *ctx, int device) {
  if (!ctx || device < TENSOR_CPU || device >= TENSOR_MAX_DEVICES) return STRATA_EINVAL;
  if (device >= 0 && ctx->devmem[device].pool) tpool_empty_cache(ctx->devmem[device].pool);
  return STRATA_OK;
}
