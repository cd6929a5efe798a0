/* liboffload: budgets, tensor states, moves through every tier with the
 * bytes intact, eviction on the warm-up trace against a brute-force optimum,
 * the NVMe file's life and errors. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/offload.h>

#define CB 16384 /* chunk bytes: a multiple of 4096 */

static offload_t *make(size_t dev, size_t host, size_t nvme, const char *dir) {
  offload_config_t c = OFFLOAD_CONFIG_DEFAULTS;
  c.budget[OFFLOAD_DEVICE] = dev, c.budget[OFFLOAD_HOST] = host, c.budget[OFFLOAD_NVME] = nvme;
  c.chunk_bytes = CB, c.nvme_dir = dir;
  offload_t *o = NULL;
  char err[512];
  cr_assert_eq(offload_create(&o, &c, err, sizeof err), STRATA_OK, "%s", err);
  return o;
}

/* n tensors of a whole chunk each */
static void chunks(offload_t *o, int n) {
  for (int i = 0; i < n; i++) {
    int t;
    cr_assert_eq(offload_tensor_add(o, CB, &t), 0);
    cr_assert_eq(t, i);
  }
}

Test(offload, config_errors) {
  offload_config_t c = OFFLOAD_CONFIG_DEFAULTS;
  offload_t *o = NULL;
  char err[512];
  c.chunk_bytes = 0;
  cr_expect_eq(offload_create(&o, &c, err, sizeof err), STRATA_EINVAL);
  cr_expect(strstr(err, "chunk_bytes 0"), "%s", err);
  c = (offload_config_t)OFFLOAD_CONFIG_DEFAULTS;
  c.budget[OFFLOAD_DEVICE] = 1000, c.chunk_bytes = 4096;
  cr_expect_eq(offload_create(&o, &c, err, sizeof err), STRATA_EINVAL);
  cr_expect(strstr(err, "device budget of 1000 bytes holds no chunk of 4096 bytes"), "%s", err);
  c = (offload_config_t)OFFLOAD_CONFIG_DEFAULTS;
  c.budget[OFFLOAD_NVME] = 1 << 20;
  cr_expect_eq(offload_create(&o, &c, err, sizeof err), STRATA_EINVAL);
  cr_expect(strstr(err, "needs nvme_dir"), "%s", err);
  c.nvme_dir = "/nonexistent/strata";
  cr_expect_eq(offload_create(&o, &c, err, sizeof err), STRATA_EIO);
  cr_expect(strstr(err, "'/nonexistent/strata'"), "%s", err);
  c.nvme_dir = "/proc"; /* a directory nothing can be created in */
  cr_expect_eq(offload_create(&o, &c, err, sizeof err), STRATA_EIO);
  cr_expect(strstr(err, "cannot create '/proc/strata-offload-"), "%s", err);
  cr_expect_null(o);
}

Test(offload, packing) {
  offload_t *o = make(4 * CB, 4 * CB, 0, NULL);
  int a, b, c, d, ca, cb2, cc;
  size_t oa, ob, oc;
  cr_assert_eq(offload_tensor_add(o, 5000, &a), 0);
  cr_assert_eq(offload_tensor_add(o, 5000, &b), 0);
  cr_assert_eq(offload_tensor_add(o, 8000, &c), 0); /* 5000 + 5056 + 8000 > CB: a new chunk */
  offload_tensor_place(o, a, &ca, &oa), offload_tensor_place(o, b, &cb2, &ob), offload_tensor_place(o, c, &cc, &oc);
  cr_expect(ca == 0 && oa == 0 && cb2 == 0 && ob == 5056 && cc == 1 && oc == 0, "%d@%zu %d@%zu %d@%zu", ca, oa, cb2,
            ob, cc, oc);
  cr_expect_eq(offload_tensor_add(o, CB + 1, &d), STRATA_EINVAL);
  cr_expect(strstr(offload_error(o), "does not fit a chunk"), "%s", offload_error(o));
  offload_destroy(o);
}

Test(offload, budgets_and_pinning) {
  offload_t *o = make(2 * CB, 2 * CB, 0, NULL);
  chunks(o, 5);
  void *p;
  cr_assert_eq(offload_access(o, 0, OFFLOAD_DEVICE, &p), 0);
  cr_assert_eq(offload_access(o, 1, OFFLOAD_DEVICE, &p), 0);
  /* both device chunks pinned: a third cannot come */
  cr_expect_eq(offload_access(o, 2, OFFLOAD_DEVICE, &p), STRATA_ENOMEM);
  cr_expect(strstr(offload_error(o), "device tier: no room for 16384 bytes") &&
                strstr(offload_error(o), "holds 2 chunks of 16384 bytes, 2 of them pinned"),
            "%s", offload_error(o));
  offload_state_t st;
  offload_tensor_state(o, 0, &st);
  cr_expect_eq(st, OFFLOAD_COMPUTE);
  cr_assert_eq(offload_release(o, 0, OFFLOAD_HOLD_AFTER_FWD), 0);
  cr_expect_eq(offload_release(o, 0, OFFLOAD_HOLD), STRATA_ESTATE, "released twice");
  cr_assert_eq(offload_access(o, 2, OFFLOAD_DEVICE, &p), 0, "%s", offload_error(o));
  cr_expect_eq(offload_chunk_tier(o, 0), OFFLOAD_HOST, "the unpinned chunk moved down");
  cr_expect_eq(offload_chunk_tier(o, 2), OFFLOAD_DEVICE);
  /* chunk 3 takes the place of an unpinned one, which goes to the host */
  cr_assert_eq(offload_release(o, 1, OFFLOAD_HOLD), 0);
  cr_assert_eq(offload_release(o, 2, OFFLOAD_HOLD), 0);
  cr_assert_eq(offload_access(o, 3, OFFLOAD_DEVICE, &p), 0, "%s", offload_error(o));
  offload_stats_t s;
  offload_stats(o, &s);
  cr_expect(s.held[OFFLOAD_DEVICE] == 2 * CB && s.held[OFFLOAD_HOST] == 2 * CB, "%zu %zu", s.held[0], s.held[1]);
  /* 5 chunks, 4 places and no NVMe tier: the fifth has nowhere to go, and nothing moved for it */
  cr_expect_eq(offload_access(o, 4, OFFLOAD_DEVICE, &p), STRATA_ENOMEM);
  cr_expect(strstr(offload_error(o), "host tier: no room") && strstr(offload_error(o), "no lower tier"), "%s",
            offload_error(o));
  offload_stats_t s2;
  offload_stats(o, &s2);
  cr_expect(s2.held[OFFLOAD_DEVICE] == 2 * CB && s2.held[OFFLOAD_HOST] == 2 * CB && offload_chunk_tier(o, 4) == -1);
  offload_destroy(o);
}

Test(offload, free_gives_memory_back) {
  offload_t *o = make(2 * CB, 2 * CB, 0, NULL);
  int a, b;
  offload_tensor_add(o, 100, &a), offload_tensor_add(o, 100, &b); /* one chunk */
  unsigned char *p, *q;
  cr_assert_eq(offload_access(o, a, OFFLOAD_DEVICE, (void **)&p), 0);
  cr_assert_eq(offload_access(o, b, OFFLOAD_DEVICE, (void **)&q), 0);
  memset(p, 7, 100), memset(q, 9, 100);
  offload_release(o, a, OFFLOAD_FREE);
  cr_expect_eq(offload_chunk_tier(o, 0), OFFLOAD_DEVICE, "b still needs the chunk");
  offload_release(o, b, OFFLOAD_HOLD_AFTER_BWD);
  cr_assert_eq(offload_access(o, b, OFFLOAD_DEVICE, (void **)&q), 0);
  cr_expect_eq(q[99], 9);
  offload_release(o, b, OFFLOAD_FREE);
  cr_expect_eq(offload_chunk_tier(o, 0), -1, "all FREE: the chunk holds nothing");
  offload_stats_t s;
  offload_stats(o, &s);
  cr_expect_eq(s.held[OFFLOAD_DEVICE], 0);
  cr_assert_eq(offload_access(o, a, OFFLOAD_DEVICE, (void **)&p), 0);
  cr_expect(p[0] == 0 && p[99] == 0, "a chunk given back comes back zeroed");
  offload_destroy(o);
}

/* Every chunk through the device, the host and the NVMe file and back, its bytes intact. */
Test(offload, bytes_through_every_tier) {
  char dir[] = "/tmp/strata-offload-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  offload_t *o = make(CB, CB, 16 * CB, dir);
  /* the file is unlinked at once: nothing in the directory */
  DIR *dd = opendir(dir);
  int entries = 0;
  for (struct dirent *de; (de = readdir(dd));) entries += de->d_name[0] != '.';
  closedir(dd);
  cr_expect_eq(entries, 0, "the NVMe file is visible");
  const int n = 8;
  chunks(o, n);
  for (int rep = 0; rep < 2; rep++)
    for (int i = 0; i < n; i++) {
      unsigned *p;
      cr_assert_eq(offload_access(o, i, OFFLOAD_DEVICE, (void **)&p), 0, "%s", offload_error(o));
      for (int k = 0; k < CB / 4; k++) {
        if (rep) cr_assert_eq(p[k], (unsigned)(i * 1000003u + k), "chunk %d word %d", i, k);
        else p[k] = (unsigned)(i * 1000003u + k);
      }
      cr_assert_eq(offload_release(o, i, OFFLOAD_HOLD), 0);
    }
  offload_stats_t s;
  offload_stats(o, &s);
  cr_expect(s.moved[OFFLOAD_DEVICE][OFFLOAD_HOST] > 0 && s.moved[OFFLOAD_HOST][OFFLOAD_NVME] > 0 &&
                s.moved[OFFLOAD_NVME][OFFLOAD_DEVICE] > 0,
            "moves %llu %llu %llu", (unsigned long long)s.moved[0][1], (unsigned long long)s.moved[1][2],
            (unsigned long long)s.moved[2][0]);
  cr_expect(s.peak[OFFLOAD_DEVICE] == CB && s.peak[OFFLOAD_HOST] == CB, "budgets exceeded: %zu %zu", s.peak[0],
            s.peak[1]);
  offload_destroy(o);
  cr_expect_eq(rmdir(dir), 0, "the directory is left empty");
}

Test(offload, other_memory_shrinks_the_room) {
  offload_t *o = make(4 * CB, 4 * CB, 0, NULL);
  chunks(o, 4);
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(offload_access(o, i, OFFLOAD_DEVICE, NULL), 0);
    offload_release(o, i, OFFLOAD_HOLD);
  }
  cr_assert_eq(offload_set_other(o, OFFLOAD_DEVICE, 2 * CB + 1), 0, "%s", offload_error(o));
  offload_stats_t s;
  offload_stats(o, &s);
  cr_expect(s.held[OFFLOAD_DEVICE] == CB && s.held[OFFLOAD_HOST] == 3 * CB && s.evictions == 3, "%zu %zu %llu",
            s.held[0], s.held[1], (unsigned long long)s.evictions);
  cr_expect_eq(offload_set_other(o, OFFLOAD_NVME, 1), STRATA_EINVAL);
  offload_destroy(o);
}

/* The fewest misses of accesses seq[0..n) with a device of k chunks that
 * starts holding the set `start` (bitmask): a dynamic program over the
 * device's possible contents. */
static int optimum(const int *seq, int n, int k, unsigned start, int nchunks) {
  int states = 1 << nchunks, inf = 1 << 20;
  int *cur = malloc(sizeof(int) * (size_t)states), *next = malloc(sizeof(int) * (size_t)states);
  for (int s = 0; s < states; s++) cur[s] = inf;
  cur[start] = 0;
  for (int i = 0; i < n; i++) {
    for (int s = 0; s < states; s++) next[s] = inf;
    unsigned x = 1u << seq[i];
    for (int s = 0; s < states; s++) {
      if (cur[s] >= inf) continue;
      if (s & x) {
        if (cur[s] < next[s]) next[s] = cur[s];
        continue;
      }
      if (__builtin_popcount((unsigned)s) < k) {
        int t = (int)((unsigned)s | x);
        if (cur[s] + 1 < next[t]) next[t] = cur[s] + 1;
      } else {
        for (int y = 0; y < nchunks; y++)
          if (s & (1 << y)) {
            int t = (int)(((unsigned)s & ~(1u << y)) | x);
            if (cur[s] + 1 < next[t]) next[t] = cur[s] + 1;
          }
      }
    }
    int *tmp = cur;
    cur = next, next = tmp;
  }
  int best = inf;
  for (int s = 0; s < states; s++)
    if (cur[s] < best) best = cur[s];
  free(cur), free(next);
  return best;
}

/* After the warm-up iteration the manager evicts on the trace: on random
 * sequences over 6 chunks with room for 3 on the device, the second
 * iteration's fetches are the fewest possible from where it starts. */
Test(offload, belady_on_the_trace_is_optimal) {
  srand(12345);
  int worse_lru = 0;
  for (int trial = 0; trial < 200; trial++) {
    const int nch = 6, k = 3, n = 14;
    int seq[14];
    for (int i = 0; i < n; i++) seq[i] = i < nch ? i : rand() % nch; /* every chunk at least once */
    for (int i = n - 1; i > 0; i--) {
      int j = rand() % (i + 1), t = seq[i];
      seq[i] = seq[j], seq[j] = t;
    }
    offload_t *o = make((size_t)k * CB, 64 * CB, 0, NULL);
    chunks(o, nch);
    offload_stats_t s0, s1;
    for (int it = 0; it < 2; it++) {
      if (it == 1) offload_stats(o, &s0);
      unsigned start = 0;
      for (int c = 0; c < nch; c++) start |= offload_chunk_tier(o, c) == OFFLOAD_DEVICE ? 1u << c : 0;
      for (int i = 0; i < n; i++) {
        cr_assert_eq(offload_access(o, seq[i], OFFLOAD_DEVICE, NULL), 0, "%s", offload_error(o));
        offload_release(o, seq[i], OFFLOAD_HOLD);
      }
      if (it == 1) {
        offload_stats(o, &s1);
        int got = (int)(s1.fetches - s0.fetches), best = optimum(seq, n, k, start, nch);
        cr_expect_eq(got, best, "trial %d: %d fetches on the trace, the optimum %d", trial, got, best);
        cr_expect(s1.traced);
        /* the offline optimum of the iteration's events: each miss of a full device fetches one
         * chunk and moves one down */
        uint64_t moved, opt;
        offload_iteration_end(o);
        cr_assert_eq(offload_last_iteration(o, &moved, &opt), 0);
        cr_expect_eq(opt, 2ull * (uint64_t)best * CB, "trial %d: optimum %llu bytes, the DP says %d misses", trial,
                     (unsigned long long)opt, best);
        cr_expect_eq(moved, (uint64_t)(s1.moved[0][1] + s1.moved[1][0] - s0.moved[0][1] - s0.moved[1][0]));
        cr_expect_eq(moved, opt, "trial %d: the manager moved %llu bytes on its trace, the optimum %llu", trial,
                     (unsigned long long)moved, (unsigned long long)opt);
        break;
      } else {
        /* the warm-up itself (LRU, from an empty device): never better than the optimum */
        offload_stats(o, &s1);
        int best = optimum(seq, n, k, 0, nch);
        int misses = (int)s1.fetches + nch; /* + each chunk's first placement */
        cr_expect(misses >= best, "LRU %d below the optimum %d", misses, best);
        worse_lru += misses > best;
      }
      offload_iteration_end(o);
    }
    offload_destroy(o);
  }
  cr_expect(worse_lru > 0, "LRU was optimal on every sequence: the sequences test nothing");
}

/* The optimum bounds LRU's warm-up from below; forced moves (an access on
 * the host) and chunks given back count as the manager counts them. */
Test(offload, last_iteration_bounds_and_forced_moves) {
  offload_t *o = make(2 * CB, 64 * CB, 0, NULL);
  uint64_t moved, opt;
  cr_expect_eq(offload_last_iteration(o, &moved, &opt), STRATA_ESTATE);
  chunks(o, 4);
  const int seq[] = {0, 1, 2, 0, 1, 2, 3, 0, 3};
  for (int i = 0; i < 9; i++) {
    cr_assert_eq(offload_access(o, seq[i], OFFLOAD_DEVICE, NULL), 0);
    offload_release(o, seq[i], OFFLOAD_HOLD);
  }
  offload_iteration_end(o);
  cr_assert_eq(offload_last_iteration(o, &moved, &opt), 0);
  cr_expect(opt <= moved && opt > 0, "LRU %llu, optimum %llu", (unsigned long long)moved, (unsigned long long)opt);
  /* iteration 2, from {0, 3} on the device: 0 used there; 1 fetched, moving 0 down (next needed on
   * the host: it goes down then anyway); 1 given back (nothing moved); 0 on the host (down already);
   * 1 fresh on the device (nothing moved): 2 chunks moved at best. The manager evicts by the
   * warm-up's trace, not this one: at least as many. */
  cr_assert_eq(offload_access(o, 0, OFFLOAD_DEVICE, NULL), 0);
  offload_release(o, 0, OFFLOAD_HOLD);
  offload_access(o, 1, OFFLOAD_DEVICE, NULL), offload_release(o, 1, OFFLOAD_FREE);
  offload_access(o, 0, OFFLOAD_HOST, NULL), offload_release(o, 0, OFFLOAD_HOLD);
  offload_access(o, 1, OFFLOAD_DEVICE, NULL), offload_release(o, 1, OFFLOAD_HOLD);
  offload_iteration_end(o);
  cr_assert_eq(offload_last_iteration(o, &moved, &opt), 0);
  cr_expect_eq(opt, 2 * CB, "optimum %llu", (unsigned long long)opt);
  cr_expect(moved >= opt, "the manager moved %llu", (unsigned long long)moved);
  offload_destroy(o);
}

/* A held tensor can be freed where it lies; its chunk then comes back zeroed. */
Test(offload, free_from_hold) {
  offload_t *o = make(2 * CB, 4 * CB, 0, NULL);
  chunks(o, 1);
  float *p;
  cr_assert_eq(offload_access(o, 0, OFFLOAD_DEVICE, (void **)&p), 0);
  p[3] = 7;
  offload_release(o, 0, OFFLOAD_HOLD_AFTER_BWD);
  cr_expect_eq(offload_release(o, 0, OFFLOAD_HOLD), STRATA_ESTATE); /* only FREE from a hold */
  cr_assert_eq(offload_release(o, 0, OFFLOAD_FREE), 0);
  cr_expect_eq(offload_chunk_tier(o, 0), -1);
  cr_expect_eq(offload_release(o, 0, OFFLOAD_FREE), STRATA_ESTATE);
  cr_assert_eq(offload_access(o, 0, OFFLOAD_HOST, (void **)&p), 0);
  cr_expect_eq(p[3], 0);
  offload_destroy(o);
}

/* Prefetch on the trace: each chunk is used on the device, then on the
 * host (as the CPU optimizer takes it); with one prefetch before each
 * access, the second iteration's device accesses all find their chunk
 * there already, in the order the trace says, bytes intact. A CUDA tier
 * asked of a build without CUDA is refused by name. */
Test(offload, prefetch_on_the_trace) {
  offload_t *o = make(2 * CB, 8 * CB, 0, NULL);
  chunks(o, 4);
  offload_stats_t s0, s1;
  int started = -1;
  cr_assert_eq(offload_prefetch(o, 1, &started), 0);
  cr_expect_eq(started, 0, "nothing before the trace");
  for (int it = 0; it < 2; it++) {
    offload_stats(o, &s0);
    for (int k = 0; k < 4; k++) {
      if (it == 1) {
        cr_assert_eq(offload_prefetch(o, 1, &started), 0, "%s", offload_error(o));
        cr_expect_eq(started, 1, "chunk %d: nothing prefetched", k);
        cr_expect_eq(offload_chunk_tier(o, k), OFFLOAD_DEVICE, "the next chunk on the trace is %d", k);
      }
      unsigned char *p;
      cr_assert_eq(offload_access(o, k, OFFLOAD_DEVICE, (void **)&p), 0, "%s", offload_error(o));
      if (it == 0) memset(p, 0x40 + k, CB);
      else cr_expect(p[0] == 0x40 + k && p[CB - 1] == 0x40 + k, "chunk %d's bytes", k);
      offload_release(o, k, OFFLOAD_HOLD);
      cr_assert_eq(offload_access(o, k, OFFLOAD_HOST, NULL), 0);
      offload_release(o, k, OFFLOAD_HOLD);
    }
    offload_stats(o, &s1);
    if (it == 1)
      cr_expect(s1.fetches == s0.fetches + 4 && s1.prefetches == s0.prefetches + 4,
                "fetches %llu (the host accesses' 4), prefetches %llu", (unsigned long long)(s1.fetches - s0.fetches),
                (unsigned long long)(s1.prefetches - s0.prefetches));
    offload_iteration_end(o);
  }
  offload_destroy(o);
#if !defined(STRATA_CUDA)
  offload_config_t c = OFFLOAD_CONFIG_DEFAULTS;
  c.cuda_device = 0;
  char err[256];
  cr_expect_eq(offload_create(&o, &c, err, sizeof err), STRATA_EUNSUPPORTED);
  cr_expect(strstr(err, "no CUDA"), "%s", err);
#endif
}

/* A break starts a new chunk. */
Test(offload, chunk_break) {
  offload_t *o = make(0, 64 * CB, 0, NULL);
  int a, b, c, ca, cb, cc;
  cr_assert_eq(offload_tensor_add(o, 100, &a), 0);
  cr_assert_eq(offload_chunk_break(o), 0);
  cr_assert_eq(offload_tensor_add(o, 100, &b), 0);
  cr_assert_eq(offload_tensor_add(o, 100, &c), 0);
  offload_tensor_place(o, a, &ca, NULL), offload_tensor_place(o, b, &cb, NULL), offload_tensor_place(o, c, &cc, NULL);
  cr_expect(ca == 0 && cb == 1 && cc == 1, "chunks %d %d %d", ca, cb, cc);
  offload_destroy(o);
}

/* The search picks the size whose chunks, packed as the manager packs them,
 * take the fewest bytes: checked against managers built at every size. */
Test(offload, chunk_size_search) {
  const size_t sizes[] = {3000, 5000, 0, 7000, 1200, 1200, 9000, 0, 2500, 2500, 2500};
  const int n = sizeof sizes / sizeof *sizes;
  size_t best = 0, total = 0, want = 0, want_total = 0;
  cr_assert_eq(offload_chunk_search(sizes, n, 8192, 32768, 1024, &best, &total), 0);
  for (size_t cs = 9216; cs <= 32768; cs += 1024) { /* 8192 cannot hold 9000 */
    offload_config_t c = OFFLOAD_CONFIG_DEFAULTS;
    c.budget[OFFLOAD_DEVICE] = 0, c.chunk_bytes = cs;
    offload_t *o;
    cr_assert_eq(offload_create(&o, &c, NULL, 0), 0);
    for (int i = 0, t; i < n; i++)
      cr_assert_eq(sizes[i] ? offload_tensor_add(o, sizes[i], &t) : offload_chunk_break(o), 0);
    offload_stats_t st;
    offload_stats(o, &st);
    if (!want || (size_t)st.chunks * cs < want_total) want = cs, want_total = (size_t)st.chunks * cs;
    offload_destroy(o);
  }
  cr_expect(best == want && total == want_total, "search %zu (%zu bytes), managers %zu (%zu)", best, total, want,
            want_total);
  cr_expect_eq(offload_chunk_search(sizes, n, 1024, 8192, 1024, &best, NULL), STRATA_ENOTFOUND);
}
