/* The caching allocator's bookkeeping (libtensor/src/devpool.c) over malloc:
 * reuse, splitting and merging, best fit, the statistics, the release of the
 * cache when the backend runs out and direct allocation. The CUDA build puts
 * cudaMalloc behind the same pool. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <strata/status.h>

#include "../../libtensor/src/devpool.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* A malloc backend with a budget: a reservation beyond it is STRATA_ENOMEM
 * (or `fail_with`, when set, for every call). */
typedef struct {
  size_t held, budget;
  int fail_with;
  int calls;
} backend_t;

static int be_reserve(void *user, void **p, size_t bytes) {
  backend_t *b = user;
  b->calls++;
  if (b->fail_with) return b->fail_with;
  if (b->budget && b->held + bytes > b->budget) return STRATA_ENOMEM;
  *p = aligned_alloc(512, (bytes + 511) / 512 * 512);
  if (!*p) return STRATA_ENOMEM;
  b->held += bytes;
  return STRATA_OK;
}
static void be_release(void *user, void *p, size_t bytes) {
  backend_t *b = user;
  b->held -= bytes;
  free(p);
}

static tpool_t *make(backend_t *b, int caching) {
  tpool_backend_t be = {be_reserve, be_release, b};
  tpool_t *p = NULL;
  cr_assert_eq(tpool_create(&p, &be, caching), STRATA_OK);
  return p;
}

static tpool_stats_t stats(tpool_t *p) {
  tpool_stats_t s;
  tpool_stats(p, &s);
  return s;
}

Test(devpool, reuses_a_freed_block_without_the_backend) {
  backend_t b = {0};
  tpool_t *p = make(&b, 1);
  void *x, *y;
  cr_assert_eq(tpool_alloc(p, &x, 1000), 0);
  tpool_stats_t s = stats(p);
  cr_expect_eq(s.allocated, 1000);
  cr_expect_eq(s.reserved, 2 * MiB, "small requests share 2 MiB segments: %zu", s.reserved);
  cr_expect_eq(s.segments, 1);
  cr_assert_eq(tpool_free(p, x), 0);
  cr_assert_eq(tpool_alloc(p, &y, 800), 0);
  cr_expect_eq(y, x, "the freed block serves the next request");
  s = stats(p);
  cr_expect_eq(b.calls, 1, "one segment reserved in all");
  cr_expect_eq(s.reserves, 1);
  cr_expect_eq(s.allocated, 800);
  cr_expect_eq(s.allocated_peak, 1000);
  cr_expect_eq(tpool_free(p, y), 0);
  cr_expect_eq(tpool_free(p, y), STRATA_EINVAL, "a second free is refused");
  cr_expect_eq(tpool_free(p, (char *)x + 512), STRATA_EINVAL, "so is a pointer inside a block");
  tpool_destroy(p);
  cr_expect_eq(b.held, 0);
}

Test(devpool, splits_and_merges_within_a_segment) {
  backend_t b = {0};
  tpool_t *p = make(&b, 1);
  void *x, *y, *z;
  cr_assert_eq(tpool_alloc(p, &x, 1000), 0); /* rounds to 1024 */
  cr_assert_eq(tpool_alloc(p, &y, 512), 0);
  cr_assert_eq(tpool_alloc(p, &z, 3000), 0); /* 3072 */
  cr_expect_eq((char *)y, (char *)x + 1024);
  cr_expect_eq((char *)z, (char *)y + 512);
  tpool_stats_t s = stats(p);
  cr_expect_eq(s.allocated, 4512);
  cr_expect_eq(s.cached, 2 * MiB - 1024 - 512 - 3072);
  /* Freeing the middle then the ends leaves one free block: the segment
   * holds nothing and empty_cache gives it back. */
  tpool_free(p, y);
  tpool_free(p, x);
  cr_expect_eq(tpool_empty_cache(p), 0, "z still lives in the segment");
  tpool_free(p, z);
  s = stats(p);
  cr_expect_eq(s.cached, 2 * MiB);
  cr_expect_eq(s.allocated, 0);
  cr_expect_eq(tpool_empty_cache(p), 2 * MiB);
  s = stats(p);
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(s.segments, 0);
  cr_expect_eq(s.reserved_peak, 2 * MiB);
  cr_expect_eq(b.held, 0);
  tpool_destroy(p);
}

Test(devpool, best_fit) {
  backend_t b = {0};
  tpool_t *p = make(&b, 1);
  void *a[5];
  size_t sz[5] = {4 * KiB, 512, 2 * KiB, 512, 8 * KiB};
  for (int i = 0; i < 5; i++) cr_assert_eq(tpool_alloc(p, &a[i], sz[i]), 0);
  tpool_free(p, a[0]); /* free holes of 4 KiB and 2 KiB, kept apart by live blocks */
  tpool_free(p, a[2]);
  void *q;
  cr_assert_eq(tpool_alloc(p, &q, 1536), 0);
  cr_expect_eq(q, a[2], "the 2 KiB hole fits best");
  cr_assert_eq(tpool_alloc(p, &q, 3 * KiB), 0);
  cr_expect_eq(q, a[0], "then the 4 KiB one");
  tpool_destroy(p);
  cr_expect_eq(b.held, 0, "destroy releases segments with live blocks too");
}

Test(devpool, large_requests) {
  backend_t b = {0};
  tpool_t *p = make(&b, 1);
  void *x, *y, *z, *w;
  cr_assert_eq(tpool_alloc(p, &x, 3 * MiB), 0);
  cr_expect_eq(stats(p).reserved, 20 * MiB, "under 10 MiB: a 20 MiB segment");
  cr_assert_eq(tpool_alloc(p, &y, 3 * MiB), 0);
  cr_expect_eq((char *)y, (char *)x + 3 * MiB, "cut from the same segment");
  cr_assert_eq(tpool_alloc(p, &z, 15 * MiB + 1), 0);
  cr_expect_eq(stats(p).reserved, 20 * MiB + 16 * MiB, "14 MiB left do not fit: its own, rounded to 2 MiB");
  cr_assert_eq(tpool_alloc(p, &w, 100), 0);
  cr_expect_eq(stats(p).reserved, 38 * MiB, "small requests never come from large segments");
  /* A large block keeps a tail of 1 MiB or less rather than splitting it off. */
  tpool_free(p, z);
  void *v;
  cr_assert_eq(tpool_alloc(p, &v, 15 * MiB + 512 * KiB), 0);
  cr_expect_eq(v, z, "the best fit of the 14 and 16 MiB free blocks");
  tpool_stats_t s = stats(p);
  cr_expect_eq(s.cached, 14 * MiB + 2 * MiB - 512, "cached %zu", s.cached);
  tpool_destroy(p);
  cr_expect_eq(b.held, 0);
}

Test(devpool, peaks_follow_the_sum_of_live_requests) {
  backend_t b = {0};
  tpool_t *p = make(&b, 1);
  size_t sizes[6] = {100, 5 * MiB, 700 * KiB, 12 * MiB, 3, 2 * MiB};
  void *q[6];
  size_t live = 0, peak = 0;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 6; i++) {
      cr_assert_eq(tpool_alloc(p, &q[i], sizes[i] + round), 0);
      live += sizes[i] + round;
      if (live > peak) peak = live;
      if (i % 2 == 1) { /* free every other one at once */
        tpool_free(p, q[i - 1]);
        live -= sizes[i - 1] + round;
      }
    }
    for (int i = 1; i < 6; i += 2) tpool_free(p, q[i]), live -= sizes[i] + round;
    tpool_stats_t s = stats(p);
    cr_expect_eq(s.allocated, live);
    cr_expect_eq(s.allocated_peak, peak, "round %d: peak %zu, expected %zu", round, s.allocated_peak, peak);
    cr_expect_geq(s.reserved_peak, s.allocated_peak);
    cr_expect_eq(s.cached, s.reserved, "nothing lives: everything reserved is cached");
  }
  int64_t reserves = stats(p).reserves;
  cr_expect_leq(reserves, 5, "later rounds reuse the first one's segments (%lld reserves)", (long long)reserves);
  tpool_reset_peak(p);
  tpool_stats_t s = stats(p);
  cr_expect_eq(s.allocated_peak, 0);
  cr_expect_eq(s.reserved_peak, s.reserved);
  tpool_destroy(p);
}

Test(devpool, a_full_backend_gets_the_cache_back_and_one_retry) {
  backend_t b = {.budget = 24 * MiB};
  tpool_t *p = make(&b, 1);
  void *x, *y, *z;
  cr_assert_eq(tpool_alloc(p, &x, 12 * MiB), 0);
  cr_assert_eq(tpool_free(p, x), 0); /* cached: 12 MiB held */
  cr_assert_eq(tpool_alloc(p, &y, 14 * MiB), 0, "12 + 14 > 24 MiB: the cache goes, then it fits");
  tpool_stats_t s = stats(p);
  cr_expect_eq(s.retries, 1);
  cr_expect_eq(s.releases, 1);
  cr_expect_eq(s.reserved, 14 * MiB);
  cr_expect_eq(b.held, 14 * MiB);
  cr_expect_eq(tpool_alloc(p, &z, 16 * MiB), STRATA_ENOMEM, "nothing cached to give back");
  cr_expect_eq(z, NULL);
  s = stats(p);
  cr_expect_eq(s.retries, 1, "no retry without a cache");
  cr_expect_eq(s.allocated, 14 * MiB, "a failure changes nothing");
  cr_expect_eq(s.reserved, 14 * MiB);
  /* A cache that does not make room: released, retried once, still ENOMEM. */
  void *small;
  cr_assert_eq(tpool_alloc(p, &small, 1000), 0);
  tpool_free(p, small);
  cr_expect_eq(tpool_alloc(p, &z, 16 * MiB), STRATA_ENOMEM);
  s = stats(p);
  cr_expect_eq(s.retries, 2);
  cr_expect_eq(s.reserved, 14 * MiB, "the small segment went back");
  tpool_free(p, y);
  tpool_destroy(p);
  cr_expect_eq(b.held, 0);
}

Test(devpool, other_backend_errors_pass_through) {
  backend_t b = {.fail_with = STRATA_ECUDA};
  tpool_t *p = make(&b, 1);
  void *x;
  cr_expect_eq(tpool_alloc(p, &x, 4096), STRATA_ECUDA);
  cr_expect_eq(b.calls, 1, "only a full device is retried");
  tpool_stats_t s = stats(p);
  cr_expect_eq(s.reserved, 0);
  cr_expect_eq(s.allocated, 0);
  tpool_destroy(p);
}

Test(devpool, direct_allocation_reserves_per_request) {
  backend_t b = {0};
  tpool_t *p = make(&b, 0);
  void *x, *y;
  cr_assert_eq(tpool_alloc(p, &x, 1000), 0);
  cr_assert_eq(tpool_alloc(p, &y, 3000), 0);
  tpool_stats_t s = stats(p);
  cr_expect_eq(s.reserved, 4000, "exact sizes, no rounding, no cache");
  cr_expect_eq(s.allocated, 4000);
  cr_expect_eq(s.segments, 2);
  tpool_free(p, x);
  s = stats(p);
  cr_expect_eq(s.reserved, 3000);
  cr_expect_eq(s.cached, 0);
  cr_expect_eq(s.releases, 1);
  cr_expect_eq(s.reserved_peak, 4000);
  tpool_free(p, y);
  cr_expect_eq(b.held, 0);
  tpool_destroy(p);
}

/* Random allocations and frees against a shadow list: live blocks never
 * overlap, the statistics add up, and when all is freed every segment is
 * one free block again. */
Test(devpool, random_pattern_keeps_blocks_apart) {
  backend_t b = {0};
  tpool_t *p = make(&b, 1);
  enum { N = 400 };
  void *ptr[N] = {0};
  size_t len[N] = {0}, live = 0;
  unsigned r = 12345;
  for (int step = 0; step < 20000; step++) {
    r = r * 1103515245u + 12345u;
    int i = (int)((r >> 8) % N);
    if (ptr[i]) {
      cr_assert_eq(tpool_free(p, ptr[i]), 0);
      live -= len[i], ptr[i] = NULL;
    } else {
      r = r * 1103515245u + 12345u;
      size_t n = (r >> 16) % 4 == 0 ? (r >> 4) % (12 * MiB) + 1 : (r >> 4) % (64 * KiB) + 1;
      cr_assert_eq(tpool_alloc(p, &ptr[i], n), 0);
      cr_assert_eq((uintptr_t)ptr[i] % 512, 0);
      len[i] = n, live += n;
      for (int j = 0; j < N; j++)
        if (j != i && ptr[j])
          cr_assert((char *)ptr[i] + n <= (char *)ptr[j] || (char *)ptr[j] + len[j] <= (char *)ptr[i],
                    "step %d: block %d overlaps block %d", step, i, j);
    }
    if (step % 997 == 0) cr_assert_eq(stats(p).allocated, live);
  }
  for (int i = 0; i < N; i++)
    if (ptr[i]) tpool_free(p, ptr[i]);
  tpool_stats_t s = stats(p);
  cr_expect_eq(s.allocated, 0);
  cr_expect_eq(s.cached, s.reserved);
  cr_expect_eq(tpool_empty_cache(p), s.reserved, "every segment is whole again");
  cr_expect_eq(b.held, 0);
  tpool_destroy(p);
}

/* The public side: the CPU's reserved bytes are its allocated ones, and a
 * bad STRATA_CUDA_ALLOC is named when device memory is first asked for. */
#include <strata/tensor.h>

Test(devpool, memory_stats_on_the_cpu) {
  tensor_ctx_t *ctx;
  tensor_t t;
  tensor_memory_stats_t st;
  int64_t shape[2] = {10, 100};
  cr_assert_eq(tensor_ctx_create(&ctx, NULL), 0);
  cr_assert_eq(tensor_alloc(ctx, &t, TENSOR_F32, TENSOR_CPU, 2, shape), 0);
  cr_assert_eq(tensor_memory_stats(ctx, TENSOR_CPU, &st), 0);
  cr_expect_eq(st.allocated, 4000);
  cr_expect_eq(st.reserved, 4000);
  cr_expect_eq(st.reserved_peak, 4000);
  tensor_free(ctx, &t);
  cr_assert_eq(tensor_memory_stats(ctx, TENSOR_CPU, &st), 0);
  cr_expect_eq(st.allocated, 0);
  cr_expect_eq(st.allocated_peak, 4000);
  cr_expect_eq(tensor_memory_stats(ctx, TENSOR_MAX_DEVICES, &st), STRATA_EINVAL);
  cr_expect_eq(tensor_memory_empty_cache(ctx, TENSOR_CPU), 0);
  tensor_ctx_destroy(ctx);
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.cuda_alloc = (tensor_cuda_alloc_t)7;
  cr_expect_eq(tensor_ctx_create(&ctx, &o), STRATA_EINVAL);
}

Test(devpool, bad_environment_value_is_named) {
  tensor_ctx_t *ctx;
  tensor_t t;
  int64_t shape[1] = {256};
  setenv("STRATA_CUDA_ALLOC", "caching", 1);
  cr_assert_eq(tensor_ctx_create(&ctx, NULL), 0, "the value is checked where it matters");
  int rc = tensor_alloc(ctx, &t, TENSOR_F32, 0, 1, shape);
#if defined(STRATA_CUDA)
  cr_expect_eq(rc, STRATA_EINVAL);
  cr_expect(strstr(tensor_last_error(ctx), "STRATA_CUDA_ALLOC=caching"), "%s", tensor_last_error(ctx));
#else
  cr_expect_eq(rc, STRATA_EUNSUPPORTED);
#endif
  tensor_ctx_destroy(ctx);
  unsetenv("STRATA_CUDA_ALLOC");
  cr_assert_eq(tensor_ctx_create(&ctx, NULL), 0);
  if (tensor_cuda_device_count() == 0) {
    cr_expect_eq(tensor_alloc(ctx, &t, TENSOR_F32, 0, 1, shape), STRATA_EUNSUPPORTED, "%s", tensor_last_error(ctx));
    tensor_memory_stats_t st;
    cr_assert_eq(tensor_memory_stats(ctx, 0, &st), 0);
    cr_expect_eq(st.allocated + st.reserved + (size_t)st.segments, 0);
  }
  tensor_ctx_destroy(ctx);
}
