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

typedef struct {
  int tier;       /* -1: holds no memory */
  char *mem;      /* device (arena slot) or host memory; NULL on NVMe */
  long slot;      /* device arena slot or NVMe file slot; -1 */
  size_t used;    /* bytes of tensors packed in it */
  int compute;    /* its tensors in COMPUTE: pinned */
  int live;       /* its tensors not FREE */
  uint64_t last;  /* clock of its last access (LRU) */
  int *moments;   /* warm-up: the moments of its accesses, ascending */
  int nmoments, capmoments;
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
  if (arena && posix_memalign((void **)&o->arena, OFFLOAD_ALIGN, arena) != 0) {
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
  o->st.direct = o->direct;
  *out = o;
  return STRATA_OK;
}

void offload_destroy(offload_t *o) {
  if (!o) return;
  for (int c = 0; c < o->nchunks; c++) {
    if (o->chunks[c].tier == OFFLOAD_HOST) free(o->chunks[c].mem);
    free(o->chunks[c].moments);
  }
  if (o->fd >= 0) close(o->fd);
  for (int i = 0; i < o->npool; i++) free(o->pool[i]);
  free(o->pool);
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
  size_t at = o->nchunks ? (o->chunks[o->nchunks - 1].used + 63) / 64 * 64 : cb;
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
     * the optimizer streams through them */
    size_t huge = (size_t)2 << 20, al = cb >= huge ? huge : OFFLOAD_ALIGN;
    if (posix_memalign((void **)mem, al, (cb + al - 1) / al * al) == 0) {
      if (al == huge) madvise(*mem, cb, MADV_HUGEPAGE);
    } else {
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
    else free(c->mem);
  } else if (c->tier == OFFLOAD_NVME) give_slot(o, 1, c->slot);
  if (c->tier >= 0) account(o, c->tier, -1);
  c->tier = -1, c->mem = NULL, c->slot = -1;
}

/* The next moment chunk c is used in this iteration on the trace (INT_MAX: never). */
static int next_use(const offload_t *o, const chunk_rec *c) {
  int lo = 0, hi = c->nmoments; /* first moment > o->moment - 1 (the current access is moment - 1) */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (c->moments[mid] < o->moment) lo = mid + 1;
    else hi = mid;
  }
  return lo < c->nmoments ? c->moments[lo] : 0x7fffffff;
}

/* The chunk of tier t to move down: not pinned, not `keep`; the one needed
 * furthest ahead on the trace, else the least recently used. -1: none. */
static int victim(const offload_t *o, int t, int keep) {
  int best = -1;
  long long best_key = -1;
  for (int i = 0; i < o->nchunks; i++) {
    const chunk_rec *c = &o->chunks[i];
    if (c->tier != t || c->compute > 0 || i == keep) continue;
    long long key = o->st.traced ? (long long)next_use(o, c) * (1LL << 32) + (long long)(UINT32_MAX - (c->last & UINT32_MAX))
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
  /* the copy first: a failed write leaves the chunk where it was */
  if (to == OFFLOAD_NVME) rc = nvme_write(o->fd, c->mem, cb, (size_t)slot * cb, o->err, sizeof o->err);
  else if (from == OFFLOAD_NVME) rc = nvme_read(o->fd, mem, cb, (size_t)c->slot * cb, o->err, sizeof o->err);
  else memcpy(mem, c->mem, cb);
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

/* ------------------------------------------------------------ access */

static int record(offload_t *o, chunk_rec *c) {
  if (o->iteration > 0) return STRATA_OK;
  if (grow((void **)&c->moments, &c->capmoments, c->nmoments + 1, sizeof *c->moments))
    return fail(o, STRATA_ENOMEM, "out of memory for the warm-up trace");
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
  if ((rc = record(o, c))) return rc;
  o->moment++, o->st.accesses++;
  if (c->tier < 0) { /* its first use since it held nothing: zeroed memory on the tier */
    if ((rc = make_room(o, tier, ci, o->cfg.chunk_bytes))) return rc;
    char *mem;
    long slot;
    if ((rc = place(o, c, tier, &mem, &slot))) return rc;
    c->tier = tier, c->mem = mem, c->slot = slot;
    account(o, tier, 1);
    if (mem) memset(mem, 0, o->cfg.chunk_bytes);
    else {
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
  return STRATA_OK;
}

int offload_release(offload_t *o, int t, offload_state_t state) {
  if (!o) return STRATA_EINVAL;
  if (!check_tensor(o, t) || state == OFFLOAD_COMPUTE || state < OFFLOAD_FREE || state >= OFFLOAD_STATES)
    return fail(o, STRATA_EINVAL, "offload_release: tensor %d to state %d", t, (int)state);
  tensor_rec *tr = &o->tensors[t];
  chunk_rec *c = &o->chunks[tr->chunk];
  if (tr->state != OFFLOAD_COMPUTE)
    return fail(o, STRATA_ESTATE, "offload_release: tensor %d is not in use (state %d)", t, tr->state);
  c->compute--;
  tr->state = state;
  if (state == OFFLOAD_FREE && --c->live == 0) unplace(o, c); /* nothing in it is needed */
  return STRATA_OK;
}

int offload_set_other(offload_t *o, offload_tier_t tier, size_t bytes) {
  if (!o) return STRATA_EINVAL;
  if (tier != OFFLOAD_DEVICE && tier != OFFLOAD_HOST)
    return fail(o, STRATA_EINVAL, "offload_set_other: tier %d (the device or the host)", (int)tier);
  o->other[tier] = bytes;
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

int offload_iteration_end(offload_t *o) {
  if (!o) return STRATA_EINVAL;
  if (o->iteration == 0) o->st.traced = 1;
  o->iteration++;
  o->moment = 0;
  return STRATA_OK;
}

int offload_stats(const offload_t *o, offload_stats_t *st) {
  if (!o || !st) return STRATA_EINVAL;
  *st = o->st;
  st->chunks = o->nchunks, st->tensors = o->ntensors;
  return STRATA_OK;
}
