/* The chunk manager (strata/offload.h): chunks of one size on three tiers
 * with hard budgets, tensors with PatrickStar's states inside them, moves
 * one tier down to make room, and the choice of what moves: Belady's MIN on
 * the warm-up iteration's trace, LRU before it.
 *
 * Tiers. The device tier is an arena of budget / chunk_bytes slots
 * allocated at creation (it stands in for GPU memory: a request beyond it
 * fails, it never grows); the host tier allocates each chunk as it arrives,
 * up to its budget; the NVMe tier is slots of one file. A tier's room is
 * (budget - the other memory of offload_set_other) / chunk_bytes chunks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <strata/offload.h>

#include "internal.h"

typedef struct {
  int chunk;
  size_t off, bytes;
  int state; /* offload_state_t */
} tensor_rec;

/* One event of an iteration, for offload_last_iteration's optimum: an
 * access of chunk c on tier (fresh: the chunk held no memory), a chunk
 * giving its memory back (tier -1), or the device's room changing to c
 * chunks (tier -2). */
typedef struct {
  int c, tier, fresh;
} ev_rec;

typedef struct {
  ev_rec *ev;
  int n, cap;
  unsigned char *on_device; /* chunks on the device when it began */
  int nchunks;              /* (their count then) */
  long room;                /* the device's room then */
  uint64_t moved;           /* device <-> host bytes moved during it (the last: in all) */
} ev_log;

typedef struct {
  int tier;       /* -1: holds no memory */
  char *mem;      /* device (arena slot) or host memory; NULL on NVMe */
  long slot;      /* device arena slot or NVMe file slot; -1 */
  size_t used;    /* bytes of tensors packed in it */
  int compute;    /* its tensors in COMPUTE: pinned */
  int live;       /* its tensors not FREE */
  uint64_t last;  /* clock of its last access (LRU) */
  int *moments;   /* warm-up: the moments of its accesses, ascending */
  signed char *tiers; /* and the tier of each (-1: its tensors all FREE then, nothing to keep) */
  int nmoments, capmoments, captiers;
} chunk_rec;

struct offload {
  offload_config_t cfg;
  size_t other[OFFLOAD_TIERS];
  int count[OFFLOAD_TIERS]; /* chunks on each tier */
  char *arena;              /* device tier */
  long arena_slots;
  long *free_slots[2];      /* free slot stacks: [0] device arena, [1] NVMe file */
  char **pool;              /* host chunk buffers given back, kept for the next (their pages are mapped) */
  int npool, cappool;
  long nfree[2], capfree[2], nvme_next;
  int fd, direct;
  chunk_rec *chunks;
  int nchunks, capchunks;
  tensor_rec *tensors;
  int ntensors, captensors;
  offload_stats_t st;
  int iteration, moment; /* the moment: accesses so far in this iteration */
  uint64_t clock;
  int brk;                  /* the next tensor starts a new chunk */
  int cuda;                 /* the device tier is CUDA memory (cfg.cuda_device) */
  void *stream;             /* and its copies' stream */
  int pending;              /* copies queued on it since it was last synchronised */
  /* This iteration's events and the last complete one's (offload_last_iteration) */
  ev_log log[2];
  char err[768], note[256];
};

static int give_slot(offload_t *o, int k, long s);
static int fail(offload_t *o, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(offload_t *o, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(o->err, sizeof o->err, fmt, ap);
  va_end(ap);
  return code;
}

/* ------------------------------------------------------------ memory and copies */

/* Waits for the copies queued on the CUDA stream (before the host touches a
 * chunk's memory or an access hands a chunk out). */
static int sync_copies(offload_t *o) {
  if (!o->pending) return STRATA_OK;
  o->pending = 0;
#if defined(STRATA_CUDA)
  return offload_cuda_sync(o->stream, o->err, sizeof o->err);
#else
  return STRATA_OK;
#endif
}

/* n bytes from src to dst, whatever tiers they are on (a CUDA tier: queued on the stream). */
static int copy(offload_t *o, void *dst, const void *src, size_t n) {
#if defined(STRATA_CUDA)
  if (o->cuda) {
    o->pending = 1;
    return offload_cuda_copy(dst, src, n, o->stream, o->err, sizeof o->err);
  }
#endif
  memcpy(dst, src, n);
  return STRATA_OK;
}

/* A host chunk: pinned with a CUDA tier, else aligned (huge pages from 2 MiB). */
static int host_alloc(offload_t *o, char **mem, size_t cb) {
#if defined(STRATA_CUDA)
  if (o->cuda) return offload_cuda_host_alloc((void **)mem, cb);
#endif
  size_t huge = (size_t)2 << 20, al = cb >= huge ? huge : OFFLOAD_ALIGN;
  if (posix_memalign((void **)mem, al, (cb + al - 1) / al * al) != 0) return STRATA_ENOMEM;
  if (al == huge) madvise(*mem, cb, MADV_HUGEPAGE);
  return STRATA_OK;
}

static void host_free(offload_t *o, char *p) {
  if (!p) return;
  sync_copies(o); /* (a copy may still read it) */
#if defined(STRATA_CUDA)
  if (o->cuda) {
    offload_cuda_host_free(p);
    return;
  }
#endif
  free(p);
}

const char *offload_tier_name(offload_tier_t t) {
  static const char *const names[] = {"device", "host", "NVMe"};
  return t >= OFFLOAD_DEVICE && t < OFFLOAD_TIERS ? names[t] : "?";
}

const char *offload_error(const offload_t *o) { return o ? o->err : "no offload manager"; }
const char *offload_note(const offload_t *o) { return o ? o->note : ""; }

static int grow(void **p, int *cap, int need, size_t size) {
  if (need <= *cap) return 0;
  int n = *cap ? *cap * 2 : 16;
  while (n < need) n *= 2;
  void *q = realloc(*p, (size_t)n * size);
  if (!q) return -1;
  *p = q, *cap = n;
  return 0;
}

int offload_create(offload_t **out, const offload_config_t *cfg, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out || !cfg) return STRATA_EINVAL;
  *out = NULL;
  char why[512] = "";
  size_t cb = cfg->chunk_bytes;
  int nvme = cfg->budget[OFFLOAD_NVME] > 0;
  if (cb == 0) snprintf(why, sizeof why, "chunk_bytes 0 must be > 0");
  else if (nvme && cb % OFFLOAD_ALIGN)
    snprintf(why, sizeof why, "chunk_bytes %zu must be a multiple of %d with an NVMe tier (aligned I/O)", cb,
             OFFLOAD_ALIGN);
  else if (cfg->budget[OFFLOAD_DEVICE] > 0 && cfg->budget[OFFLOAD_DEVICE] < cb)
    snprintf(why, sizeof why, "the device budget of %zu bytes holds no chunk of %zu bytes (0: no device tier)",
             cfg->budget[OFFLOAD_DEVICE], cb);
  else if (nvme && !cfg->nvme_dir)
    snprintf(why, sizeof why, "an NVMe budget of %zu bytes needs nvme_dir", cfg->budget[OFFLOAD_NVME]);
  if (why[0]) {
    if (err && errlen) snprintf(err, errlen, "offload: %s", why);
    return STRATA_EINVAL;
  }
  offload_t *o = calloc(1, sizeof *o);
  if (!o) return STRATA_ENOMEM;
  o->cfg = *cfg;
  o->cfg.nvme_dir = NULL; /* borrowed for the call only */
  o->fd = -1;
  o->arena_slots = (long)(cfg->budget[OFFLOAD_DEVICE] / cb);
  size_t arena = (size_t)o->arena_slots * cb;
  int rc = STRATA_OK;
  if (cfg->cuda_device >= 0) {
#if defined(STRATA_CUDA)
    o->cuda = 1;
    rc = offload_cuda_open(cfg->cuda_device, arena, (void **)&o->arena, &o->stream, why, sizeof why);
#else
    rc = STRATA_EUNSUPPORTED;
    snprintf(why, sizeof why, "cuda_device %d: this build of strata has no CUDA", cfg->cuda_device);
#endif
  } else if (arena && posix_memalign((void **)&o->arena, OFFLOAD_ALIGN, arena) != 0) {
    o->arena = NULL;
    rc = STRATA_ENOMEM;
    snprintf(why, sizeof why, "out of memory for the device tier's arena of %zu bytes", arena);
  }
  for (long sl = o->arena_slots - 1; !rc && sl >= 0; sl--) /* every arena slot free, slot 0 first */
    if (give_slot(o, 0, sl)) {
      rc = STRATA_ENOMEM;
      snprintf(why, sizeof why, "out of memory for the arena's slot table");
    }
  if (!rc && nvme) {
    o->direct = cfg->direct;
    o->fd = nvme_open(cfg->nvme_dir, &o->direct, why, sizeof why);
    if (o->fd < 0) rc = STRATA_EIO;
    else if (cfg->direct && !o->direct)
      snprintf(o->note, sizeof o->note, "the NVMe tier in '%s' runs without O_DIRECT (the file system refused it)",
               cfg->nvme_dir);
  }
  if (rc) {
    if (err && errlen) snprintf(err, errlen, "offload: %s", why);
    offload_destroy(o);
    return rc;
  }
  o->st.direct = o->direct, o->st.cuda = o->cuda;
  *out = o;
  return STRATA_OK;
}

void offload_destroy(offload_t *o) {
  if (!o) return;
  sync_copies(o);
  for (int c = 0; c < o->nchunks; c++) {
    if (o->chunks[c].tier == OFFLOAD_HOST) host_free(o, o->chunks[c].mem);
    free(o->chunks[c].moments), free(o->chunks[c].tiers);
  }
  if (o->fd >= 0) close(o->fd);
  for (int i = 0; i < o->npool; i++) host_free(o, o->pool[i]);
  free(o->pool);
  for (int i = 0; i < 2; i++) free(o->log[i].ev), free(o->log[i].on_device);
#if defined(STRATA_CUDA)
  if (o->cuda) offload_cuda_close(o->arena, o->stream), o->arena = NULL;
#endif
  free(o->arena), free(o->free_slots[0]), free(o->free_slots[1]), free(o->chunks), free(o->tensors);
  free(o);
}

/* ------------------------------------------------------------ tensors */

int offload_tensor_add(offload_t *o, size_t bytes, int *tensor) {
  if (!o || !tensor) return STRATA_EINVAL;
  size_t cb = o->cfg.chunk_bytes;
  if (bytes == 0 || bytes > cb)
    return fail(o, STRATA_EINVAL, "offload_tensor_add: a tensor of %zu bytes does not fit a chunk of %zu", bytes, cb);
  /* keep tensors aligned within their chunk */
  size_t at = o->nchunks && !o->brk ? (o->chunks[o->nchunks - 1].used + 63) / 64 * 64 : cb;
  o->brk = 0;
  if (at + bytes > cb) { /* a new chunk */
    if (grow((void **)&o->chunks, &o->capchunks, o->nchunks + 1, sizeof *o->chunks))
      return fail(o, STRATA_ENOMEM, "offload_tensor_add: out of memory for chunk %d", o->nchunks);
    o->chunks[o->nchunks] = (chunk_rec){.tier = -1, .slot = -1};
    o->nchunks++, at = 0;
  }
  if (grow((void **)&o->tensors, &o->captensors, o->ntensors + 1, sizeof *o->tensors))
    return fail(o, STRATA_ENOMEM, "offload_tensor_add: out of memory for tensor %d", o->ntensors);
  o->tensors[o->ntensors] = (tensor_rec){.chunk = o->nchunks - 1, .off = at, .bytes = bytes, .state = OFFLOAD_FREE};
  o->chunks[o->nchunks - 1].used = at + bytes;
  *tensor = o->ntensors++;
  return STRATA_OK;
}

int offload_chunk_break(offload_t *o) {
  if (!o) return STRATA_EINVAL;
  o->brk = 1;
  return STRATA_OK;
}

static int check_tensor(const offload_t *o, int t) { return o && t >= 0 && t < o->ntensors; }

int offload_tensor_place(const offload_t *o, int t, int *chunk, size_t *offset) {
  if (!check_tensor(o, t)) return STRATA_EINVAL;
  if (chunk) *chunk = o->tensors[t].chunk;
  if (offset) *offset = o->tensors[t].off;
  return STRATA_OK;
}

int offload_tensor_state(const offload_t *o, int t, offload_state_t *state) {
  if (!check_tensor(o, t) || !state) return STRATA_EINVAL;
  *state = (offload_state_t)o->tensors[t].state;
  return STRATA_OK;
}

int offload_chunk_tier(const offload_t *o, int c) { return o && c >= 0 && c < o->nchunks ? o->chunks[c].tier : -1; }

/* ------------------------------------------------------------ tiers */

static int has_tier(const offload_t *o, int t) {
  return t == OFFLOAD_HOST || (t == OFFLOAD_DEVICE && o->arena_slots > 0) || (t == OFFLOAD_NVME && o->fd >= 0);
}

/* Chunks tier t can hold now. */
static long room(const offload_t *o, int t) {
  size_t b = o->cfg.budget[t], other = o->other[t];
  long n = b > other ? (long)((b - other) / o->cfg.chunk_bytes) : 0;
  return t == OFFLOAD_DEVICE && n > o->arena_slots ? o->arena_slots : n;
}

static int give_slot(offload_t *o, int k, long s);

static long take_slot(offload_t *o, int k) {
  if (o->nfree[k] > 0) return o->free_slots[k][--o->nfree[k]];
  return k == 0 ? -1 : o->nvme_next++; /* (the arena's slots are all on the stack) */
}

static int give_slot(offload_t *o, int k, long s) {
  if (o->nfree[k] == o->capfree[k]) {
    long n = o->capfree[k] ? o->capfree[k] * 2 : 64;
    long *p = realloc(o->free_slots[k], (size_t)n * sizeof *p);
    if (!p) return -1;
    o->free_slots[k] = p, o->capfree[k] = n;
  }
  o->free_slots[k][o->nfree[k]++] = s;
  return 0;
}

static void account(offload_t *o, int t, int delta) {
  o->count[t] += delta;
  o->st.held[t] = (size_t)o->count[t] * o->cfg.chunk_bytes;
  if (o->st.held[t] > o->st.peak[t]) o->st.peak[t] = o->st.held[t];
}

/* Memory for chunk c on tier t (the caller made room): *mem and slot. */
static int place(offload_t *o, chunk_rec *c, int t, char **mem, long *slot) {
  size_t cb = o->cfg.chunk_bytes;
  *mem = NULL, *slot = -1;
  if (t == OFFLOAD_DEVICE) {
    *slot = take_slot(o, 0);
    if (*slot < 0) return fail(o, STRATA_ENOMEM, "device tier: no free arena slot");
    *mem = o->arena + (size_t)*slot * cb;
  } else if (t == OFFLOAD_HOST) {
    if (o->npool > 0) {
      *mem = o->pool[--o->npool];
      return STRATA_OK;
    }
    /* chunks of 2 MiB and more on huge pages where the kernel gives them: fewer TLB misses when
     * the optimizer streams through them; pinned with a CUDA device tier */
    if (host_alloc(o, mem, cb) != STRATA_OK) {
      *mem = NULL;
      return fail(o, STRATA_ENOMEM, "host tier: the system has no %zu bytes for chunk %d", cb, (int)(c - o->chunks));
    }
  } else {
    *slot = take_slot(o, 1);
  }
  return STRATA_OK;
}

static void unplace(offload_t *o, chunk_rec *c) {
  if (c->tier == OFFLOAD_DEVICE) give_slot(o, 0, c->slot);
  else if (c->tier == OFFLOAD_HOST) { /* kept for the next host chunk while the budget has room for it */
    if (o->count[OFFLOAD_HOST] + o->npool <= room(o, OFFLOAD_HOST) &&
        !grow((void **)&o->pool, &o->cappool, o->npool + 1, sizeof *o->pool))
      o->pool[o->npool++] = c->mem;
    else host_free(o, c->mem);
  } else if (c->tier == OFFLOAD_NVME) give_slot(o, 1, c->slot);
  if (c->tier >= 0) account(o, c->tier, -1);
  c->tier = -1, c->mem = NULL, c->slot = -1;
}

/* How much moving chunk c down from tier t now costs later, on the trace:
 * the moment it is next used on t or above (later is better); past every
 * such moment when its next event gives it back (nothing to fetch) or uses
 * it on a lower tier (it goes down then anyway: better still). */
static long long next_use(const offload_t *o, const chunk_rec *c, int t) {
  int lo = 0, hi = c->nmoments; /* first moment > o->moment - 1 (the current access is moment - 1) */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (c->moments[mid] < o->moment) lo = mid + 1;
    else hi = mid;
  }
  if (lo >= c->nmoments || c->tiers[lo] < 0) return 1LL << 31;
  return c->tiers[lo] > t ? 1LL << 32 : c->moments[lo];
}

/* The chunk of tier t to move down: not pinned, not `keep`; the one needed
 * furthest ahead on the trace, else the least recently used. -1: none. */
static int victim(const offload_t *o, int t, int keep) {
  int best = -1;
  long long best_key = -1;
  for (int i = 0; i < o->nchunks; i++) {
    const chunk_rec *c = &o->chunks[i];
    if (c->tier != t || c->compute > 0 || i == keep) continue;
    long long key = o->st.traced ? next_use(o, c, t) * (1LL << 30) + (long long)((UINT32_MAX - (c->last & UINT32_MAX)) >> 2)
                                 : (long long)((UINT64_MAX - c->last) >> 1);
    if (key > best_key) best = i, best_key = key;
  }
  return best;
}

static int move(offload_t *o, int ci, int to);

/* Makes room on tier t for one more chunk (keep: the chunk that is coming, not a victim). */
static int make_room(offload_t *o, int t, int keep, size_t request) {
  while (o->count[t] + 1 > room(o, t)) {
    int v = victim(o, t, keep);
    if (v < 0 || !has_tier(o, t + 1) || t + 1 >= OFFLOAD_TIERS) {
      int pinned = 0;
      for (int i = 0; i < o->nchunks; i++) pinned += o->chunks[i].tier == t && o->chunks[i].compute > 0;
      return fail(o, STRATA_ENOMEM,
                  "%s tier: no room for %zu bytes: its budget of %zu bytes (%zu used by the rest of the program) "
                  "holds %d chunks of %zu bytes, %d of them pinned by tensors in use%s",
                  offload_tier_name((offload_tier_t)t), request, o->cfg.budget[t], o->other[t], o->count[t],
                  o->cfg.chunk_bytes, pinned, v >= 0 ? ", and there is no lower tier to move one to" : "");
    }
    int rc = move(o, v, t + 1);
    if (rc) return rc;
    o->st.evictions++;
  }
  return STRATA_OK;
}

/* Moves chunk ci (holding memory) to tier `to`, making room there first. */
static int move(offload_t *o, int ci, int to) {
  chunk_rec *c = &o->chunks[ci];
  int from = c->tier, rc;
  size_t cb = o->cfg.chunk_bytes;
  if (from == to) return STRATA_OK;
  if ((rc = make_room(o, to, ci, cb))) return rc;
  char *mem;
  long slot;
  if ((rc = place(o, c, to, &mem, &slot))) return rc;
  /* the copy first: a failed write leaves the chunk where it was (NVMe: the host chunk's bytes
   * settled first) */
  if ((to == OFFLOAD_NVME || from == OFFLOAD_NVME) && (rc = sync_copies(o))) return rc;
  if (to == OFFLOAD_NVME) rc = nvme_write(o->fd, c->mem, cb, (size_t)slot * cb, o->err, sizeof o->err);
  else if (from == OFFLOAD_NVME) rc = nvme_read(o->fd, mem, cb, (size_t)c->slot * cb, o->err, sizeof o->err);
  else rc = copy(o, mem, c->mem, cb);
  if (rc) { /* give back what was taken for it */
    chunk_rec tmp = {.tier = to, .mem = mem, .slot = slot};
    account(o, to, 1);
    unplace(o, &tmp);
    return rc;
  }
  unplace(o, c);
  c->tier = to, c->mem = mem, c->slot = slot;
  account(o, to, 1);
  o->st.moved[from][to] += cb;
  return STRATA_OK;
}

/* ------------------------------------------------------------ the iteration's events */

static uint64_t device_host_moved(const offload_t *o) {
  return o->st.moved[OFFLOAD_DEVICE][OFFLOAD_HOST] + o->st.moved[OFFLOAD_HOST][OFFLOAD_DEVICE];
}

/* A new iteration's log: which chunks are on the device, its room, the bytes moved so far. */
static int begin_log(offload_t *o) {
  ev_log *lg = &o->log[0];
  lg->n = 0, lg->nchunks = o->nchunks, lg->room = room(o, OFFLOAD_DEVICE), lg->moved = device_host_moved(o);
  free(lg->on_device);
  lg->on_device = calloc((size_t)(o->nchunks ? o->nchunks : 1), 1);
  if (!lg->on_device) return fail(o, STRATA_ENOMEM, "out of memory for the iteration's events");
  for (int c = 0; c < o->nchunks; c++) lg->on_device[c] = o->chunks[c].tier == OFFLOAD_DEVICE;
  return STRATA_OK;
}

static int log_event(offload_t *o, int c, int tier, int fresh) {
  ev_log *lg = &o->log[0];
  if (!lg->on_device && begin_log(o)) return STRATA_ENOMEM; /* the first iteration's */
  if (grow((void **)&lg->ev, &lg->cap, lg->n + 1, sizeof *lg->ev))
    return fail(o, STRATA_ENOMEM, "out of memory for the iteration's events");
  lg->ev[lg->n++] = (ev_rec){.c = c, .tier = tier, .fresh = fresh};
  return STRATA_OK;
}

/* ------------------------------------------------------------ access */

static int record(offload_t *o, chunk_rec *c, int tier) {
  if (o->iteration > 0) return STRATA_OK;
  if (grow((void **)&c->moments, &c->capmoments, c->nmoments + 1, sizeof *c->moments) ||
      grow((void **)&c->tiers, &c->captiers, c->nmoments + 1, sizeof *c->tiers))
    return fail(o, STRATA_ENOMEM, "out of memory for the warm-up trace");
  c->tiers[c->nmoments] = (signed char)tier;
  c->moments[c->nmoments++] = o->moment;
  return STRATA_OK;
}

int offload_access(offload_t *o, int t, offload_tier_t tier, void **ptr) {
  if (ptr) *ptr = NULL;
  if (!o) return STRATA_EINVAL;
  if (!check_tensor(o, t)) return fail(o, STRATA_EINVAL, "offload_access: tensor %d of %d", t, o->ntensors);
  if (tier < OFFLOAD_DEVICE || tier >= OFFLOAD_TIERS || !has_tier(o, tier))
    return fail(o, STRATA_EINVAL, "offload_access: tier %d is not one of this manager's", (int)tier);
  tensor_rec *tr = &o->tensors[t];
  int ci = tr->chunk, rc;
  chunk_rec *c = &o->chunks[ci];
  if ((rc = record(o, c, (int)tier)) || (rc = log_event(o, ci, (int)tier, c->tier < 0))) return rc;
  o->moment++, o->st.accesses++;
  if (c->tier < 0) { /* its first use since it held nothing: zeroed memory on the tier */
    if ((rc = make_room(o, tier, ci, o->cfg.chunk_bytes))) return rc;
    char *mem;
    long slot;
    if ((rc = place(o, c, tier, &mem, &slot))) return rc;
    c->tier = tier, c->mem = mem, c->slot = slot;
    account(o, tier, 1);
#if defined(STRATA_CUDA)
    if (mem && o->cuda && tier == OFFLOAD_DEVICE) {
      o->pending = 1;
      if ((rc = offload_cuda_zero(mem, o->cfg.chunk_bytes, o->stream, o->err, sizeof o->err))) return rc;
    } else
#endif
    if (mem) {
      if ((rc = sync_copies(o))) return rc; /* (pooled memory a copy may still read) */
      memset(mem, 0, o->cfg.chunk_bytes);
    } else {
      char *zero = NULL; /* an NVMe slot: written zeroed */
      if (posix_memalign((void **)&zero, OFFLOAD_ALIGN, o->cfg.chunk_bytes) != 0) return fail(o, STRATA_ENOMEM, "zeroing");
      memset(zero, 0, o->cfg.chunk_bytes);
      rc = nvme_write(o->fd, zero, o->cfg.chunk_bytes, (size_t)slot * o->cfg.chunk_bytes, o->err, sizeof o->err);
      free(zero);
      if (rc) {
        unplace(o, c);
        return rc;
      }
    }
  } else if (c->tier != (int)tier) {
    if ((rc = move(o, ci, tier))) return rc;
    o->st.fetches++;
  }
  if (tr->state != OFFLOAD_COMPUTE) c->compute++;
  if (tr->state == OFFLOAD_FREE) c->live++;
  tr->state = OFFLOAD_COMPUTE;
  c->last = ++o->clock;
  if (ptr) *ptr = c->mem ? c->mem + tr->off : NULL;
  return sync_copies(o); /* the chunk's bytes are there */
}

int offload_release(offload_t *o, int t, offload_state_t state) {
  if (!o) return STRATA_EINVAL;
  if (!check_tensor(o, t) || state == OFFLOAD_COMPUTE || state < OFFLOAD_FREE || state >= OFFLOAD_STATES)
    return fail(o, STRATA_EINVAL, "offload_release: tensor %d to state %d", t, (int)state);
  tensor_rec *tr = &o->tensors[t];
  chunk_rec *c = &o->chunks[tr->chunk];
  if (tr->state == OFFLOAD_FREE || (tr->state != OFFLOAD_COMPUTE && state != OFFLOAD_FREE))
    return fail(o, STRATA_ESTATE, "offload_release: tensor %d is not in use (state %d)", t, tr->state);
  if (tr->state == OFFLOAD_COMPUTE) c->compute--;
  tr->state = state;
  if (state == OFFLOAD_FREE && --c->live == 0) { /* nothing in it is needed */
    unplace(o, c);
    int rc = record(o, c, -1);
    return rc ? rc : log_event(o, tr->chunk, -1, 0);
  }
  return STRATA_OK;
}

int offload_set_other(offload_t *o, offload_tier_t tier, size_t bytes) {
  if (!o) return STRATA_EINVAL;
  if (tier != OFFLOAD_DEVICE && tier != OFFLOAD_HOST)
    return fail(o, STRATA_EINVAL, "offload_set_other: tier %d (the device or the host)", (int)tier);
  o->other[tier] = bytes;
  if (tier == OFFLOAD_DEVICE && log_event(o, (int)room(o, tier), -2, 0))
    return fail(o, STRATA_ENOMEM, "out of memory for the iteration's events");
  while (o->count[tier] > room(o, tier)) {
    int v = victim(o, tier, -1), rc;
    if (v < 0 || !has_tier(o, tier + 1))
      return fail(o, STRATA_ENOMEM, "%s tier: %zu bytes used by the rest of the program leave room for %ld chunks, "
                  "and its %d chunks cannot move down (pinned, or no lower tier)",
                  offload_tier_name(tier), bytes, room(o, tier), o->count[tier]);
    if ((rc = move(o, v, tier + 1))) return rc;
    o->st.evictions++;
  }
  while (tier == OFFLOAD_HOST && o->npool > 0 && o->count[tier] + o->npool > room(o, tier)) free(o->pool[--o->npool]);
  return STRATA_OK;
}

int offload_prefetch(offload_t *o, int max_chunks, int *started) {
  if (started) *started = 0;
  if (!o || max_chunks < 0) return STRATA_EINVAL;
  if (!o->st.traced || o->arena_slots == 0) return STRATA_OK;
  for (int k = 0; k < max_chunks && o->count[OFFLOAD_DEVICE] < room(o, OFFLOAD_DEVICE); k++) {
    int best = -1;
    long long best_use = 0;
    for (int i = 0; i < o->nchunks; i++) { /* on the host, needed on the device soonest */
      const chunk_rec *c = &o->chunks[i];
      if (c->tier != OFFLOAD_HOST) continue;
      long long use = next_use(o, c, OFFLOAD_DEVICE);
      if (use >= 1LL << 31) continue; /* not needed again, or next on the host */
      if (best < 0 || use < best_use) best = i, best_use = use;
    }
    if (best < 0) break;
    int rc = move(o, best, OFFLOAD_DEVICE);
    if (rc) return rc;
    o->st.prefetches++;
    if (started) ++*started;
  }
  return STRATA_OK;
}

int offload_iteration_end(offload_t *o) {
  if (!o) return STRATA_EINVAL;
  if (o->iteration == 0) o->st.traced = 1;
  o->iteration++;
  o->moment = 0;
  /* this iteration's events become the last one's, and the next begins */
  ev_log done = o->log[0];
  done.moved = device_host_moved(o) - done.moved;
  free(o->log[1].ev), free(o->log[1].on_device);
  o->log[1] = done;
  memset(&o->log[0], 0, sizeof o->log[0]);
  return begin_log(o);
}

int offload_trace_restart(offload_t *o) {
  if (!o) return STRATA_EINVAL;
  for (int c = 0; c < o->nchunks; c++) o->chunks[c].nmoments = 0;
  o->iteration = 0, o->moment = 0, o->st.traced = 0;
  o->log[0].n = 0;
  return begin_log(o);
}

/* ------------------------------------------------------------ the optimum */

/* Offline, on the last iteration's events: the device's chunks begin as
 * they were; an access on the device of a chunk not there fetches it (a
 * fresh one costs nothing: it held no memory), and while the device holds
 * more than its room one is moved down: one whose next event is an access
 * on a lower tier first (it goes down then anyway), then one that is given
 * back or not used again, then the one needed on the device furthest
 * ahead (Belady's MIN). An access on a lower tier moves the chunk down.
 * Chunks in use are not pinned here, so the result bounds any schedule's
 * bytes from below. */
int offload_last_iteration(const offload_t *o, uint64_t *moved, uint64_t *optimal) {
  if (!o || !moved || !optimal) return STRATA_EINVAL;
  const ev_log *lg = &o->log[1];
  if (o->iteration == 0) return STRATA_ESTATE;
  int n = o->nchunks, E = lg->n;
  int *cur = malloc((size_t)(n ? n : 1) * sizeof *cur), *nextev = malloc((size_t)(E ? E : 1) * sizeof *nextev);
  unsigned char *in = calloc((size_t)(n ? n : 1), 1);
  if (!cur || !nextev || !in) {
    free(cur), free(nextev), free(in);
    return STRATA_ENOMEM;
  }
  for (int c = 0; c < n; c++) cur[c] = -1;
  for (int i = E - 1; i >= 0; i--) /* each event's chunk's next event */
    if (lg->ev[i].tier >= -1) nextev[i] = cur[lg->ev[i].c], cur[lg->ev[i].c] = i;
  long held = 0, cap = lg->room;
  for (int c = 0; c < lg->nchunks && c < n; c++)
    if (lg->on_device[c]) in[c] = 1, held++;
  uint64_t bytes = 0, cb = o->cfg.chunk_bytes;
  for (int i = 0; i <= E; i++) {
    int keep = -1;
    if (i < E) {
      const ev_rec *v = &lg->ev[i];
      if (v->tier == -2) cap = v->c;
      else {
        keep = v->c;
        cur[v->c] = nextev[i];
        if (v->tier == -1) held -= in[v->c], in[v->c] = 0;
        else if (v->tier == OFFLOAD_DEVICE && !in[v->c]) bytes += v->fresh ? 0 : cb, in[v->c] = 1, held++;
        else if (v->tier != OFFLOAD_DEVICE && in[v->c]) bytes += cb, in[v->c] = 0, held--;
      }
    }
    while (held > cap) {
      int best = -1;
      long long best_key = -1;
      for (int c = 0; c < n; c++) {
        if (!in[c] || c == keep) continue;
        int j = cur[c];
        long long key = j < 0 || lg->ev[j].tier == -1 ? (1LL << 40)
                        : lg->ev[j].tier != OFFLOAD_DEVICE ? (1LL << 41)
                                                           : (long long)j;
        if (key > best_key) best = c, best_key = key;
      }
      if (best < 0) break; /* (the room was too small for the chunk in use: the manager failed there too) */
      in[best] = 0, held--, bytes += cb;
    }
  }
  *moved = lg->moved;
  *optimal = bytes;
  free(cur), free(nextev), free(in);
  return STRATA_OK;
}

int offload_stats(const offload_t *o, offload_stats_t *st) {
  if (!o || !st) return STRATA_EINVAL;
  *st = o->st;
  st->chunks = o->nchunks, st->tensors = o->ntensors;
  return STRATA_OK;
}

/* ------------------------------------------------------------ chunk size */

/* Chunks of cs bytes that sizes[] need, packed as offload_tensor_add
 * packs them (64-byte aligned; 0: a break); 0 if one does not fit. */
static size_t chunks_needed(const size_t *sizes, int n, size_t cs) {
  size_t count = 0, used = cs;
  int brk = 0;
  for (int i = 0; i < n; i++) {
    if (!sizes[i]) {
      brk = 1;
      continue;
    }
    if (sizes[i] > cs) return 0;
    size_t at = brk ? cs : (used + 63) / 64 * 64;
    brk = 0;
    if (at + sizes[i] > cs) count++, at = 0;
    used = at + sizes[i];
  }
  return count;
}

int offload_chunk_search(const size_t *sizes, int n, size_t lo, size_t hi, size_t step, size_t *best,
                         size_t *total) {
  if (!sizes || n < 0 || !best || !step || lo > hi) return STRATA_EINVAL;
  size_t b = 0, bt = 0;
  for (size_t cs = lo; cs <= hi; cs += step) {
    size_t k = chunks_needed(sizes, n, cs);
    if (k && (!b || k * cs < bt)) b = cs, bt = k * cs;
    if (hi - cs < step) break;
  }
  if (!b) return STRATA_ENOTFOUND;
  *best = b;
  if (total) *total = bt;
  return STRATA_OK;
}
