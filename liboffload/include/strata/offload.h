/* strata/offload.h - memory tiers and a chunk manager (liboffload).
 *
 * Three tiers, each with a hard byte budget: the device (on a machine
 * without a GPU a bounded arena of host memory that stands in for GPU
 * memory, so the whole manager runs and is measured on the CPU), the host,
 * and NVMe (one file in a directory, aligned reads and writes, O_DIRECT
 * where the file system allows it). Following PatrickStar (Fang et al.,
 * arXiv 2108.05818), tensors are packed in creation order into chunks of a
 * fixed size, and a chunk moves between tiers only as a whole:
 *
 *   - each tensor has a state: FREE (its bytes are not needed), COMPUTE (in
 *     use: its chunk is pinned where it was asked for), HOLD, HOLD_AFTER_FWD
 *     and HOLD_AFTER_BWD (kept, movable); a chunk whose tensors are all FREE
 *     gives its memory back and comes back zeroed;
 *   - offload_access brings a tensor's chunk to the tier asked for, making
 *     room by moving other chunks one tier down (device to host, host to
 *     NVMe) and never a pinned one; a request that cannot fit even then
 *     fails with STRATA_ENOMEM and a message naming the tier, the request
 *     and what the tier holds;
 *   - the first iteration (until offload_iteration_end) records the moment
 *     of every access; afterwards the chunk evicted is the one needed
 *     furthest in the future on that trace (Belady's MIN, optimal for
 *     chunks of one size), and before it the least recently used;
 *   - offload_set_other says how much of a tier the rest of the program
 *     uses now (activations, workspaces): the room for chunks shrinks.
 *
 * liboffload depends on nothing else of strata's (it moves bytes; libparallel
 * decides what lives in the chunks and reduces them over libcomm).
 *
 *   offload_config_t c = OFFLOAD_CONFIG_DEFAULTS;
 *   c.budget[OFFLOAD_DEVICE] = 64 << 20, c.chunk_bytes = 4 << 20;
 *   offload_t *o;
 *   offload_create(&o, &c, err, sizeof err);
 *   int t;
 *   offload_tensor_add(o, 1 << 20, &t);
 *   float *p;
 *   offload_access(o, t, OFFLOAD_DEVICE, (void **)&p);   // COMPUTE, on the device
 *   ... use p ...
 *   offload_release(o, t, OFFLOAD_HOLD);                  // movable again
 *   offload_iteration_end(o);                             // the first ends the warm-up
 *   offload_destroy(o);                                   // the NVMe file goes too */
#ifndef STRATA_OFFLOAD_H
#define STRATA_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>
#include <strata/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { OFFLOAD_DEVICE = 0, OFFLOAD_HOST, OFFLOAD_NVME, OFFLOAD_TIERS } offload_tier_t;

typedef enum {
  OFFLOAD_FREE = 0,
  OFFLOAD_COMPUTE,
  OFFLOAD_HOLD,
  OFFLOAD_HOLD_AFTER_FWD,
  OFFLOAD_HOLD_AFTER_BWD,
  OFFLOAD_STATES
} offload_state_t;

typedef struct {
  size_t budget[OFFLOAD_TIERS]; /* bytes of chunks each tier may hold; device or NVMe 0: no such tier */
  size_t chunk_bytes;           /* every chunk's size (> 0; a multiple of 4096 with an NVMe tier) */
  const char *nvme_dir;         /* the NVMe tier's directory (with budget[OFFLOAD_NVME] > 0) */
  int direct;                   /* 1: open the NVMe file with O_DIRECT where the file system allows */
  /* The device tier: -1, an arena of host memory standing in for a GPU's;
   * n >= 0 (CUDA builds), memory of CUDA device n, with host chunks pinned
   * and every copy between them queued on the manager's own stream
   * (offload_prefetch overlaps them with the caller's work; an access
   * returns once its chunk is there). */
  int cuda_device;
} offload_config_t;
#define OFFLOAD_CONFIG_DEFAULTS                                                                    \
  {.budget = {64u << 20, 1u << 30, 0}, .chunk_bytes = 4u << 20, .nvme_dir = NULL, .direct = 1, .cuda_device = -1}

typedef struct offload offload_t;

/* A manager for cfg (its values are checked and named in err); the NVMe
 * file, if any, is created and at once unlinked, so that it vanishes when
 * the process ends however it ends. */
STRATA_API int offload_create(offload_t **out, const offload_config_t *cfg, char *err, size_t errlen);
/* Frees every tier; NULL is a no-op. */
STRATA_API void offload_destroy(offload_t *o);
/* The last error of o ("" if none). */
STRATA_API const char *offload_error(const offload_t *o);
/* What o chose that the caller may want to know ("" if nothing): the NVMe
 * file runs without O_DIRECT because the file system refused it. */
STRATA_API const char *offload_note(const offload_t *o);

/* A new tensor of `bytes` (FREE), packed after the previous one in the last
 * chunk, or at the start of a new chunk when it does not fit there; a
 * tensor larger than a chunk is EINVAL. */
STRATA_API int offload_tensor_add(offload_t *o, size_t bytes, int *tensor);
/* The next tensor starts a new chunk (PatrickStar's chunk lists: the
 * parameters, the gradients and each optimizer state in chunks of their
 * own, so that a list's chunks can be given back or reduced as wholes). */
STRATA_API int offload_chunk_break(offload_t *o);
/* Where tensor lives: its chunk and its offset in it. */
STRATA_API int offload_tensor_place(const offload_t *o, int tensor, int *chunk, size_t *offset);
STRATA_API int offload_tensor_state(const offload_t *o, int tensor, offload_state_t *state);
/* Sets tensor COMPUTE with its chunk on tier (moved there first, other
 * chunks moved down to make room); *ptr (may be NULL) receives its bytes,
 * valid until the tensor leaves COMPUTE. Every access is one moment of the
 * trace. */
STRATA_API int offload_access(offload_t *o, int tensor, offload_tier_t tier, void **ptr);
/* Moves tensor from COMPUTE to state (not COMPUTE); or from a HOLD state
 * to FREE, wherever its chunk is (its bytes are no longer needed: a
 * gradient after the update). */
STRATA_API int offload_release(offload_t *o, int tensor, offload_state_t state);
/* Bytes of tier the rest of the program uses now (the device or the host);
 * chunks beyond the remaining room move down at once (EINVAL for the NVMe
 * tier; ENOMEM when pinned chunks leave no way). */
STRATA_API int offload_set_other(offload_t *o, offload_tier_t tier, size_t bytes);
/* Starts bringing to the device, without moving anything else down, up to
 * max_chunks chunks (on the host) that the trace says are needed there
 * next, soonest first, while the device has free room; *started (may be
 * NULL) receives how many. With a CUDA device tier the copies run on the
 * manager's stream while the caller goes on; on the host arena they are
 * done at once. Nothing before the trace exists. */
STRATA_API int offload_prefetch(offload_t *o, int max_chunks, int *started);
/* Ends an iteration: the first one's trace becomes the eviction schedule. */
STRATA_API int offload_iteration_end(offload_t *o);

typedef struct {
  uint64_t moved[OFFLOAD_TIERS][OFFLOAD_TIERS]; /* bytes moved from tier [a] to tier [b] */
  size_t held[OFFLOAD_TIERS];                   /* bytes of chunks each tier holds now */
  size_t peak[OFFLOAD_TIERS];                   /* and at most */
  uint64_t evictions;                           /* chunks moved down to make room */
  uint64_t fetches;                             /* accesses that had to move their chunk first */
  uint64_t prefetches;                          /* chunks offload_prefetch brought to the device */
  uint64_t accesses;
  int chunks, tensors;
  int traced;                                   /* the warm-up trace is in use */
  int direct;                                   /* the NVMe file runs with O_DIRECT */
  int cuda;                                     /* the device tier is CUDA memory */
} offload_stats_t;
STRATA_API int offload_stats(const offload_t *o, offload_stats_t *st);
/* Forgets the trace: the next iteration is the warm-up again (after set-up
 * work, such as initialising the tensors, whose accesses are not an
 * iteration's). */
STRATA_API int offload_trace_restart(offload_t *o);
/* The last complete iteration (the one offload_iteration_end closed last):
 * *moved, the bytes it moved between the device and the host; *optimal,
 * the bytes an offline schedule moves for its events (the same accesses,
 * the same room for chunks at each moment) evicting by Belady's MIN and
 * without pinning: a lower bound, so *optimal / *moved <= 1 says how close
 * to optimal the manager came. STRATA_ESTATE before the first iteration
 * ends. */
STRATA_API int offload_last_iteration(const offload_t *o, uint64_t *moved, uint64_t *optimal);
/* PatrickStar's chunk-size search: among lo, lo + step, ... <= hi, the
 * chunk size that packs tensors of sizes[0..n) (in order, as
 * offload_tensor_add packs them; a size 0 is a chunk break) into the fewest
 * bytes of chunks (*total), the smallest on ties. STRATA_ENOTFOUND when no
 * candidate holds the largest tensor. */
STRATA_API int offload_chunk_search(const size_t *sizes, int n, size_t lo, size_t hi, size_t step, size_t *best,
                                    size_t *total);
/* The tier chunk lives on now (-1: it holds no memory: never used, or all its tensors FREE). */
STRATA_API int offload_chunk_tier(const offload_t *o, int chunk);
STRATA_API const char *offload_tier_name(offload_tier_t tier);

#ifdef __cplusplus
}
#endif

#endif
