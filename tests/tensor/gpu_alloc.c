/* The caching allocator on a CUDA device, through the public API: after
 * each pattern of tensor_alloc/tensor_free, `allocated` (and its peak) is
 * the sum of the tensors' bytes this program computes, exactly as the
 * accountant counts them on the CPU; a freed block serves the next request
 * of its size without cudaMalloc; empty_cache gives back what holds no
 * tensor; direct allocation (TENSOR_CUDA_ALLOC_DIRECT) reserves exactly what
 * tensors hold. A plain program for GPU machines (`make test-gpu`): exit 0
 * passed, 1 failed, 77 skipped (no CUDA device). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/tensor.h>

static int failures, checks;

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    checks++;                                                                                      \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      printf("FAIL line %d: ", __LINE__);                                                          \
      printf(__VA_ARGS__);                                                                         \
      printf("\n");                                                                                \
    }                                                                                              \
  } while (0)

static tensor_memory_stats_t stats(tensor_ctx_t *ctx) {
  tensor_memory_stats_t s;
  memset(&s, 0, sizeof s);
  if (tensor_memory_stats(ctx, 0, &s)) printf("FAIL stats: %s\n", tensor_last_error(ctx)), failures++;
  return s;
}

static int alloc(tensor_ctx_t *ctx, tensor_t *t, int64_t n) {
  int rc = tensor_alloc(ctx, t, TENSOR_F32, 0, 1, &n);
  if (rc) printf("FAIL alloc of %lld floats: %s\n", (long long)n, tensor_last_error(ctx)), failures++;
  return rc;
}

/* Sizes from 4 bytes to 48 MiB: small and large pools, own segments. */
static const int64_t sizes[] = {1, 300, 1000, 65536, 262144, 250000, 3 << 20, 1 << 20, 12 << 20, 77};
#define NS ((int)(sizeof sizes / sizeof sizes[0]))

static void pattern(tensor_ctx_t *ctx, int cache) {
  tensor_t t[NS];
  size_t live = 0, peak = 0;
  tensor_memory_reset_peak(ctx, 0);
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < NS; i++) {
      if (alloc(ctx, &t[i], sizes[i])) return;
      live += (size_t)sizes[i] * 4;
      if (live > peak) peak = live;
      tensor_memory_stats_t s = stats(ctx);
      EXPECT(s.allocated == live, "cache %d round %d: allocated %zu, tensors hold %zu", cache, round, s.allocated, live);
      EXPECT(s.reserved >= s.allocated, "reserved %zu < allocated %zu", s.reserved, s.allocated);
      if (!cache) EXPECT(s.reserved == live, "direct: reserved %zu, tensors hold %zu", s.reserved, live);
      if (i % 3 == 2) { /* free two of every three at once: holes for the next round */
        tensor_free(ctx, &t[i - 1]), live -= (size_t)sizes[i - 1] * 4;
        tensor_free(ctx, &t[i - 2]), live -= (size_t)sizes[i - 2] * 4;
      }
    }
    for (int i = 0; i < NS; i++)
      if (t[i].data) tensor_free(ctx, &t[i]), live -= (size_t)sizes[i] * 4;
    tensor_memory_stats_t s = stats(ctx);
    size_t cur = 1, pk = 0;
    tensor_memory(ctx, 0, &cur, &pk);
    EXPECT(s.allocated == 0 && cur == 0, "cache %d: %zu bytes still allocated", cache, s.allocated);
    EXPECT(s.allocated_peak == peak && pk == peak, "cache %d: peak %zu (accountant %zu), tensors held at most %zu",
           cache, s.allocated_peak, pk, peak);
    if (!cache) EXPECT(s.reserved == 0 && s.segments == 0, "direct: %zu bytes still reserved", s.reserved);
    else EXPECT(s.cached == s.reserved, "cache: %zu of %zu reserved bytes free", s.cached, s.reserved);
  }
}

int main(void) {
  tensor_ctx_t *ctx, *direct;
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.cuda_alloc = TENSOR_CUDA_ALLOC_CACHE;
  if (tensor_ctx_create(&ctx, &o)) return 2;
  if (tensor_cuda_device_count() == 0) {
    printf("gpu_alloc: skipped: no CUDA device\n");
    tensor_ctx_destroy(ctx);
    return 77;
  }
  o.cuda_alloc = TENSOR_CUDA_ALLOC_DIRECT;
  if (tensor_ctx_create(&direct, &o)) return 2;

  /* Reuse: the same size comes back at the same address, no cudaMalloc. */
  tensor_t a, b;
  if (alloc(ctx, &a, 1000) || alloc(ctx, &b, 5 << 20)) return 1;
  void *pa = a.data, *pb = b.data;
  tensor_memory_stats_t s0 = stats(ctx);
  EXPECT(s0.allocated == 4000 + (20u << 20), "allocated %zu", s0.allocated);
  tensor_free(ctx, &a), tensor_free(ctx, &b);
  if (alloc(ctx, &b, 5 << 20) || alloc(ctx, &a, 900)) return 1;
  tensor_memory_stats_t s1 = stats(ctx);
  EXPECT(a.data == pa && b.data == pb, "freed blocks are reused (%p %p, were %p %p)", a.data, b.data, pa, pb);
  EXPECT(s1.cuda_mallocs == s0.cuda_mallocs, "no cudaMalloc for a reused block (%lld, was %lld)",
         (long long)s1.cuda_mallocs, (long long)s0.cuda_mallocs);
  EXPECT(s1.allocated == 3600 + (20u << 20), "allocated %zu", s1.allocated);
  /* Reused blocks are zeroed like fresh ones. */
  float *h = malloc(3600);
  tensor_t hv = tensor_view1(h, TENSOR_F32, TENSOR_CPU, 900);
  int nz = 0;
  if (tensor_fill(ctx, &a, 3.f) == 0) {
    tensor_free(ctx, &a);
    if (alloc(ctx, &a, 900) == 0 && tensor_copy(ctx, &hv, &a) == 0)
      for (int i = 0; i < 900; i++) nz += h[i] != 0.f;
  }
  EXPECT(nz == 0, "%d elements of a reused block are not zero", nz);
  free(h);
  tensor_free(ctx, &a), tensor_free(ctx, &b);

  pattern(ctx, 1);
  pattern(direct, 0);

  /* empty_cache gives back everything that holds no tensor. */
  tensor_t keep;
  if (alloc(ctx, &keep, 100)) return 1;
  tensor_memory_empty_cache(ctx, 0);
  tensor_memory_stats_t s2 = stats(ctx);
  EXPECT(s2.reserved == 2u << 20 && s2.segments == 1, "after empty_cache: %zu bytes in %lld segments (one 2 MiB "
         "segment holds the live tensor)", s2.reserved, (long long)s2.segments);
  tensor_free(ctx, &keep);
  tensor_memory_empty_cache(ctx, 0);
  s2 = stats(ctx);
  EXPECT(s2.reserved == 0 && s2.cached == 0, "after the last free and empty_cache: %zu reserved", s2.reserved);
  EXPECT(s2.reserved_peak >= s2.allocated_peak, "reserved peak %zu < allocated peak %zu", s2.reserved_peak,
         s2.allocated_peak);

  tensor_ctx_destroy(direct);
  tensor_ctx_destroy(ctx);
  printf("gpu_alloc: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
