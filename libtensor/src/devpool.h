/* A caching allocator over segments from a backend (cudaMalloc on a GPU,
 * malloc in the tests), in the manner of PyTorch's CUDACachingAllocator but
 * small: requests round up to 512 bytes; those up to 1 MiB are cut from
 * 2 MiB segments, larger ones from 20 MiB segments (under 10 MiB) or from a
 * segment of their own size rounded to 2 MiB. A free returns the block to
 * the pool (merged with free neighbours) instead of the backend, and the
 * best-fitting free block serves the next request; only tpool_empty_cache,
 * a failed reservation (the cache is released and the reservation tried once
 * more) and tpool_destroy give segments back.
 *
 * Reuse is safe on a GPU because every kernel and copy of a context runs on
 * one stream in order: work queued after the free that reuses the block runs
 * after the work queued before it. A buffer handed to another stream (NCCL's)
 * must be waited for before it is freed.
 *
 * Plain C with no CUDA, so that the bookkeeping is tested on the CPU. A mutex
 * guards each pool. */
#ifndef STRATA_DEVPOOL_H
#define STRATA_DEVPOOL_H

#include <stddef.h>
#include <stdint.h>

/* Where segments come from. reserve returns 0, STRATA_ENOMEM when the
 * memory is exhausted (the pool then releases its cached segments and asks
 * once more) or another strata status (returned as it is). */
typedef struct {
  int (*reserve)(void *user, void **p, size_t bytes);
  void (*release)(void *user, void *p, size_t bytes);
  void *user; /* borrowed; passed to both */
} tpool_backend_t;

typedef struct {
  size_t allocated, allocated_peak; /* bytes requested by live allocations */
  size_t reserved, reserved_peak;   /* bytes in segments held from the backend */
  size_t cached;                    /* reserved bytes in free blocks */
  int64_t segments;                 /* segments held now */
  int64_t reserves, releases;       /* backend calls so far */
  int64_t retries;                  /* reservations retried after releasing the cache */
} tpool_stats_t;

typedef struct tpool tpool_t;

/* A pool over `backend` (copied). caching 0: every allocation is a segment
 * of its exact size, released on free (for debugging: the pool only counts).
 * Returns 0 or STRATA_ENOMEM. Caller destroys it. */
int tpool_create(tpool_t **out, const tpool_backend_t *backend, int caching);
/* Releases every segment, live allocations included; NULL is a no-op. */
void tpool_destroy(tpool_t *p);
/* *ptr = `bytes` (> 0) of memory, 512-byte aligned within segments the
 * backend aligns. Returns 0 or the backend's status (*ptr = NULL). */
int tpool_alloc(tpool_t *p, void **ptr, size_t bytes);
/* Returns ptr's block to the pool; STRATA_EINVAL when ptr is not a live
 * allocation of this pool (nothing changes). */
int tpool_free(tpool_t *p, void *ptr);
/* Releases the segments that hold no live allocation; returns their bytes. */
size_t tpool_empty_cache(tpool_t *p);
void tpool_stats(tpool_t *p, tpool_stats_t *s);
/* Sets the allocated and reserved peaks to their current values. */
void tpool_reset_peak(tpool_t *p);

#endif
