/* The caching allocator's bookkeeping (see devpool.h). A segment is a chain
 * of blocks in address order (prev/next); free blocks also sit in their
 * pool's free list, sorted by size then address, so the first that fits is
 * the best fit; live blocks sit in a hash table keyed by address. Merging
 * keeps the invariant that no two free blocks are neighbours, so a segment
 * with nothing live is a single free block with neither neighbour. */
#include "devpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <strata/status.h>

#define ROUND 512u                    /* every block size is a multiple */
#define SMALL_MAX ((size_t)1 << 20)   /* requests up to this share small segments */
#define SMALL_SEG ((size_t)2 << 20)   /* segment size of the small pool */
#define LARGE_SEG ((size_t)20 << 20)  /* segment of large requests under MIN_OWN */
#define MIN_OWN ((size_t)10 << 20)    /* requests from here get a segment of their own */
#define OWN_ROUND ((size_t)2 << 20)   /* ... rounded to this */

typedef struct block {
  char *ptr;
  size_t size;      /* bytes of the block */
  size_t requested; /* bytes asked for (live blocks) */
  int live;
  int large;                    /* the pool it belongs to */
  struct block *prev, *next;    /* address neighbours within the segment */
  struct block *fprev, *fnext;  /* free list (free blocks) */
  struct block *hnext;          /* hash chain (live blocks) */
  struct block *snext;          /* next segment (segment heads) */
} block_t;

struct tpool {
  tpool_backend_t be;
  int caching;
  pthread_mutex_t mu;
  block_t *free_list[2]; /* small, large */
  block_t *segs;         /* segment heads */
  block_t **hash;
  size_t nbuckets, nlive;
  tpool_stats_t st;
};

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t hash_of(const tpool_t *p, const void *ptr) {
  uintptr_t a = (uintptr_t)ptr >> 9; /* blocks are 512-byte aligned */
  a ^= a >> 17;
  a *= 0x9E3779B97F4A7C15ull;
  return (size_t)(a >> 20) & (p->nbuckets - 1);
}

/* Doubles the table when it averages two blocks a bucket; on failure the
 * chains just grow longer. */
static void hash_grow(tpool_t *p) {
  size_t nb = p->nbuckets * 2, old = p->nbuckets;
  block_t **h = calloc(nb, sizeof *h), **oh = p->hash;
  if (!h) return;
  p->hash = h, p->nbuckets = nb;
  for (size_t i = 0; i < old; i++)
    for (block_t *b = oh[i], *n; b; b = n) {
      n = b->hnext;
      size_t k = hash_of(p, b->ptr);
      b->hnext = h[k], h[k] = b;
    }
  free(oh);
}

static void hash_insert(tpool_t *p, block_t *b) {
  if (p->nlive >= 2 * p->nbuckets) hash_grow(p);
  size_t k = hash_of(p, b->ptr);
  b->hnext = p->hash[k], p->hash[k] = b;
  p->nlive++;
}

static block_t *hash_remove(tpool_t *p, const void *ptr) {
  block_t **at = &p->hash[hash_of(p, ptr)];
  for (; *at; at = &(*at)->hnext)
    if ((*at)->ptr == ptr) {
      block_t *b = *at;
      *at = b->hnext, b->hnext = NULL;
      p->nlive--;
      return b;
    }
  return NULL;
}

static int before(const block_t *a, const block_t *b) {
  return a->size < b->size || (a->size == b->size && a->ptr < b->ptr);
}

static void free_insert(tpool_t *p, block_t *b) {
  block_t **head = &p->free_list[b->large], *prev = NULL, *cur = *head;
  while (cur && before(cur, b)) prev = cur, cur = cur->fnext;
  b->fprev = prev, b->fnext = cur;
  if (cur) cur->fprev = b;
  if (prev) prev->fnext = b;
  else *head = b;
  p->st.cached += b->size;
}

static void free_remove(tpool_t *p, block_t *b) {
  if (b->fprev) b->fprev->fnext = b->fnext;
  else p->free_list[b->large] = b->fnext;
  if (b->fnext) b->fnext->fprev = b->fprev;
  b->fprev = b->fnext = NULL;
  p->st.cached -= b->size;
}

static void bump_peaks(tpool_t *p) {
  if (p->st.allocated > p->st.allocated_peak) p->st.allocated_peak = p->st.allocated;
  if (p->st.reserved > p->st.reserved_peak) p->st.reserved_peak = p->st.reserved;
}

int tpool_create(tpool_t **out, const tpool_backend_t *be, int caching) {
  tpool_t *p = calloc(1, sizeof *p);
  *out = NULL;
  if (!p) return STRATA_ENOMEM;
  p->nbuckets = 256;
  p->hash = calloc(p->nbuckets, sizeof *p->hash);
  if (!p->hash || pthread_mutex_init(&p->mu, NULL) != 0) {
    free(p->hash);
    free(p);
    return STRATA_ENOMEM;
  }
  p->be = *be;
  p->caching = caching;
  *out = p;
  return STRATA_OK;
}

static void segment_drop(tpool_t *p, block_t *head) {
  size_t bytes = 0;
  for (block_t *b = head, *n; b; b = n) {
    n = b->next;
    bytes += b->size;
    if (b != head) free(b);
  }
  p->be.release(p->be.user, head->ptr, bytes);
  p->st.reserved -= bytes;
  p->st.segments--;
  p->st.releases++;
  free(head);
}

void tpool_destroy(tpool_t *p) {
  if (!p) return;
  for (block_t *s = p->segs, *n; s; s = n) {
    n = s->snext;
    segment_drop(p, s);
  }
  pthread_mutex_destroy(&p->mu);
  free(p->hash);
  free(p);
}

/* Releases the fully free segments of both pools; the caller holds the lock. */
static size_t release_cached(tpool_t *p) {
  size_t bytes = 0;
  for (block_t **at = &p->segs; *at;) {
    block_t *s = *at;
    if (!s->live && !s->next) {
      *at = s->snext;
      free_remove(p, s);
      bytes += s->size;
      segment_drop(p, s);
    } else {
      at = &s->snext;
    }
  }
  return bytes;
}

/* A new segment of `bytes` as one block (not yet in any list). */
static int reserve(tpool_t *p, block_t **out, size_t bytes, int large) {
  void *mem = NULL;
  block_t *b = calloc(1, sizeof *b);
  if (!b) return STRATA_ENOMEM;
  p->st.reserves++;
  int rc = p->be.reserve(p->be.user, &mem, bytes);
  if (rc == STRATA_ENOMEM && p->caching && p->st.cached > 0) {
    release_cached(p);
    p->st.retries++;
    p->st.reserves++;
    rc = p->be.reserve(p->be.user, &mem, bytes);
  }
  if (rc != STRATA_OK) {
    free(b);
    return rc;
  }
  b->ptr = mem, b->size = bytes, b->large = large;
  b->snext = p->segs, p->segs = b;
  p->st.reserved += bytes;
  p->st.segments++;
  *out = b;
  return STRATA_OK;
}

/* Cuts the tail of b off as a free block when enough is left over: any
 * 512 bytes in the small pool; more than 1 MiB in the large one (smaller
 * tails of large blocks are kept whole, as PyTorch does, so that big
 * segments do not splinter). */
static void split(tpool_t *p, block_t *b, size_t size) {
  size_t rest = b->size - size;
  if (rest < ROUND || (b->large && rest <= SMALL_MAX)) return;
  block_t *t = calloc(1, sizeof *t);
  if (!t) return; /* the block stays whole */
  t->ptr = b->ptr + size, t->size = rest, t->large = b->large;
  t->prev = b, t->next = b->next;
  if (b->next) b->next->prev = t;
  b->next = t, b->size = size;
  free_insert(p, t);
}

int tpool_alloc(tpool_t *p, void **ptr, size_t bytes) {
  int rc = STRATA_OK;
  block_t *b = NULL;
  *ptr = NULL;
  if (bytes == 0) bytes = 1;
  pthread_mutex_lock(&p->mu);
  if (!p->caching) {
    if ((rc = reserve(p, &b, bytes, 1)) != STRATA_OK) goto done;
  } else {
    size_t size = round_up(bytes, ROUND);
    int large = size > SMALL_MAX;
    for (b = p->free_list[large]; b && b->size < size; b = b->fnext) {
    }
    if (b) {
      free_remove(p, b);
    } else {
      size_t seg = !large ? SMALL_SEG : size < MIN_OWN ? LARGE_SEG : round_up(size, OWN_ROUND);
      if ((rc = reserve(p, &b, seg, large)) != STRATA_OK) goto done;
    }
    split(p, b, size);
  }
  b->live = 1, b->requested = bytes;
  hash_insert(p, b);
  p->st.allocated += bytes;
  bump_peaks(p);
  *ptr = b->ptr;
done:
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* Folds b's right neighbour n (free) into b. */
static void absorb(tpool_t *p, block_t *b, block_t *n) {
  free_remove(p, n);
  b->size += n->size;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  free(n);
}

int tpool_free(tpool_t *p, void *ptr) {
  pthread_mutex_lock(&p->mu);
  block_t *b = hash_remove(p, ptr);
  if (!b) {
    pthread_mutex_unlock(&p->mu);
    return STRATA_EINVAL;
  }
  p->st.allocated -= b->requested;
  b->live = 0, b->requested = 0;
  if (!p->caching) {
    for (block_t **at = &p->segs; *at; at = &(*at)->snext)
      if (*at == b) {
        *at = b->snext;
        break;
      }
    segment_drop(p, b);
  } else {
    if (b->next && !b->next->live) absorb(p, b, b->next);
    if (b->prev && !b->prev->live) {
      block_t *left = b->prev;
      free_remove(p, left); /* its size changes: it moves in the sorted list */
      left->size += b->size;
      left->next = b->next;
      if (b->next) b->next->prev = left;
      free(b);
      b = left;
    }
    free_insert(p, b);
  }
  pthread_mutex_unlock(&p->mu);
  return STRATA_OK;
}

size_t tpool_empty_cache(tpool_t *p) {
  pthread_mutex_lock(&p->mu);
  size_t n = release_cached(p);
  pthread_mutex_unlock(&p->mu);
  return n;
}

void tpool_stats(tpool_t *p, tpool_stats_t *s) {
  pthread_mutex_lock(&p->mu);
  *s = p->st;
  pthread_mutex_unlock(&p->mu);
}

void tpool_reset_peak(tpool_t *p) {
  pthread_mutex_lock(&p->mu);
  p->st.allocated_peak = p->st.allocated;
  p->st.reserved_peak = p->st.reserved;
  pthread_mutex_unlock(&p->mu);
}
