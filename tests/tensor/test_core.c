/* Tensors, the memory accountant, the counter-based RNG and error reporting. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strata/tensor.h>

static tensor_ctx_t *ctx;
static void setup(void) { cr_assert_eq(tensor_ctx_create(&ctx, NULL), 0); }
static void teardown(void) { tensor_ctx_destroy(ctx); }
TestSuite(core, .init = setup, .fini = teardown);

Test(core, philox_known_answers) {
  /* Known-answer vectors of Philox4x32-10 from Random123's kat_vectors. */
  uint32_t out[4];
  uint32_t k0[2] = {0, 0}, c0[4] = {0, 0, 0, 0};
  tensor_philox(out, k0, c0);
  cr_expect(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu &&
            out[3] == 0x9b00dbd8u, "zero vector: %08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
  uint32_t k1[2] = {0xffffffffu, 0xffffffffu}, c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  tensor_philox(out, k1, c1);
  cr_expect(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u &&
            out[3] == 0x6d5451fdu, "ones vector: %08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
  uint32_t k2[2] = {0xa4093822u, 0x299f31d0u}, c2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
  tensor_philox(out, k2, c2);
  cr_expect(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu && out[2] == 0x5001e420u &&
            out[3] == 0x24126ea1u, "pi vector: %08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
}

Test(core, shard_equals_slice_of_whole) {
  int64_t gs[3] = {6, 10, 7};
  tensor_t whole, shard;
  cr_assert_eq(tensor_alloc(ctx, &whole, TENSOR_F32, TENSOR_CPU, 3, gs), 0);
  cr_assert_eq(tensor_fill_normal(ctx, &whole, 42, "h.0.attn.qkv.w", NULL, 0.f, 0.02f), 0);
  /* A block in the middle of every dim (like a 2-D/3-D tensor-parallel shard). */
  int64_t ls[3] = {3, 4, 5}, st[3] = {2, 5, 1};
  cr_assert_eq(tensor_alloc(ctx, &shard, TENSOR_F32, TENSOR_CPU, 3, ls), 0);
  tensor_slice_t sl = {3, {6, 10, 7}, {2, 5, 1}};
  cr_assert_eq(tensor_fill_normal(ctx, &shard, 42, "h.0.attn.qkv.w", &sl, 0.f, 0.02f), 0);
  const float *w = whole.data, *s = shard.data;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 5; k++)
        cr_expect_eq(s[(i * 4 + j) * 5 + k], w[((i + st[0]) * 10 + j + st[1]) * 7 + k + st[2]],
                     "element %d %d %d", i, j, k);
  /* A different name or seed gives different values. */
  cr_assert_eq(tensor_fill_normal(ctx, &shard, 42, "h.1.attn.qkv.w", &sl, 0.f, 0.02f), 0);
  cr_expect_neq(s[0], w[(2 * 10 + 5) * 7 + 1]);
  /* A shard that does not fit is refused with the numbers. */
  sl.start[1] = 7;
  cr_expect_eq(tensor_fill_normal(ctx, &shard, 42, "x", &sl, 0.f, 1.f), STRATA_ESHAPE);
  cr_expect(strstr(tensor_last_error(ctx), "7") != NULL, "%s", tensor_last_error(ctx));
  tensor_free(ctx, &whole), tensor_free(ctx, &shard);
}

Test(core, normal_statistics) {
  int64_t n[1] = {200000};
  tensor_t t;
  cr_assert_eq(tensor_alloc(ctx, &t, TENSOR_F32, TENSOR_CPU, 1, n), 0);
  cr_assert_eq(tensor_fill_normal(ctx, &t, 1, "stats", NULL, 1.f, 2.f), 0);
  double s = 0, s2 = 0;
  for (int i = 0; i < n[0]; i++) {
    double v = ((float *)t.data)[i];
    s += v, s2 += v * v;
  }
  double m = s / n[0], var = s2 / n[0] - m * m;
  /* Standard errors: mean 2/sqrt(2e5) = 0.0045, variance ~ 4 sqrt(2/2e5) = 0.0126; 5 sigma. */
  cr_expect(fabs(m - 1) < 0.023, "mean %f", m);
  cr_expect(fabs(var - 4) < 0.063, "variance %f", var);
  cr_assert_eq(tensor_fill_uniform(ctx, &t, 1, "u", NULL, -1.f, 3.f), 0);
  s = 0;
  for (int i = 0; i < n[0]; i++) {
    float v = ((float *)t.data)[i];
    cr_assert(v >= -1.f && v < 3.f);
    s += v;
  }
  cr_expect(fabs(s / n[0] - 1) < 0.013, "uniform mean %f", s / n[0]); /* se 0.0026 */
  tensor_free(ctx, &t);
}

/* A limit refuses what would exceed it, by name, and counts nothing for the refusal. */
Test(core, memory_limit) {
  int64_t n[1] = {1000};
  tensor_t a, b, c;
  cr_assert_eq(tensor_memory_set_limit(ctx, TENSOR_CPU, 6000), 0);
  cr_assert_eq(tensor_alloc(ctx, &a, TENSOR_F32, TENSOR_CPU, 1, n), 0);
  cr_assert_eq(tensor_alloc(ctx, &b, TENSOR_BF16, TENSOR_CPU, 1, n), 0); /* 6000 bytes: at the limit */
  cr_expect_eq(tensor_alloc(ctx, &c, TENSOR_BF16, TENSOR_CPU, 1, n), STRATA_ENOMEM);
  cr_expect(strstr(tensor_last_error(ctx), "limit of 6000 bytes (6000 in use)"), "%s", tensor_last_error(ctx));
  size_t cur;
  tensor_memory(ctx, TENSOR_CPU, &cur, NULL);
  cr_expect_eq(cur, 6000);
  tensor_free(ctx, &b);
  cr_expect_eq(tensor_alloc(ctx, &c, TENSOR_BF16, TENSOR_CPU, 1, n), 0);
  tensor_memory_set_limit(ctx, TENSOR_CPU, 0);
  cr_expect_eq(tensor_alloc(ctx, &b, TENSOR_F32, TENSOR_CPU, 1, n), 0);
  tensor_free(ctx, &a), tensor_free(ctx, &b), tensor_free(ctx, &c);
}

Test(core, memory_accountant) {
  size_t cur, peak;
  cr_assert_eq(tensor_memory(ctx, TENSOR_CPU, &cur, &peak), 0);
  cr_expect_eq(cur, 0);
  int64_t s1[2] = {100, 10}, s2[1] = {50};
  tensor_t a, b;
  cr_assert_eq(tensor_alloc(ctx, &a, TENSOR_F32, TENSOR_CPU, 2, s1), 0);
  cr_assert_eq(tensor_alloc(ctx, &b, TENSOR_BF16, TENSOR_CPU, 1, s2), 0);
  tensor_memory(ctx, TENSOR_CPU, &cur, &peak);
  cr_expect_eq(cur, 4000 + 100);
  tensor_free(ctx, &a);
  tensor_memory(ctx, TENSOR_CPU, &cur, &peak);
  cr_expect_eq(cur, 100);
  cr_expect_eq(peak, 4100);
  tensor_memory_reset_peak(ctx, TENSOR_CPU);
  tensor_memory(ctx, TENSOR_CPU, &cur, &peak);
  cr_expect_eq(peak, 100);
  tensor_free(ctx, &b);
  tensor_free(ctx, &b); /* freeing a cleared descriptor is a no-op */
  tensor_memory(ctx, TENSOR_CPU, &cur, NULL);
  cr_expect_eq(cur, 0);
  /* Views are not counted and not freed. */
  float buf[4];
  tensor_t v = tensor_view1(buf, TENSOR_F32, TENSOR_CPU, 4);
  tensor_free(ctx, &v);
  tensor_memory(ctx, TENSOR_CPU, &cur, NULL);
  cr_expect_eq(cur, 0);
}

Test(core, mismatches_return_status_and_shapes) {
  float a[24], b[24], c[24];
  tensor_t A = tensor_view2(a, TENSOR_F32, TENSOR_CPU, 4, 6), B = tensor_view2(b, TENSOR_F32, TENSOR_CPU, 5, 4);
  tensor_t Cm = tensor_view2(c, TENSOR_F32, TENSOR_CPU, 4, 4);
  cr_expect_eq(tensor_matmul(ctx, &Cm, &A, &B, 0, 0, 1.f, 0.f), STRATA_ESHAPE);
  cr_expect(strstr(tensor_last_error(ctx), "f32[4,6]@cpu") && strstr(tensor_last_error(ctx), "f32[5,4]@cpu"),
            "%s", tensor_last_error(ctx));
  tensor_t Bh = tensor_view2(b, TENSOR_BF16, TENSOR_CPU, 6, 4);
  cr_expect_eq(tensor_matmul(ctx, &Cm, &A, &Bh, 0, 0, 1.f, 0.f), STRATA_ESHAPE);
  tensor_t Ad = A;
  Ad.device = 0;
#if defined(STRATA_CUDA)
  int want = STRATA_ESHAPE;
#else
  int want = STRATA_EUNSUPPORTED;
#endif
  tensor_t Bok = tensor_view2(b, TENSOR_F32, TENSOR_CPU, 6, 4);
  cr_expect_eq(tensor_matmul(ctx, &Cm, &Ad, &Bok, 0, 0, 1.f, 0.f), want, "%s", tensor_last_error(ctx));
  cr_expect_eq(tensor_gelu_forward(ctx, &Cm, &A), STRATA_ESHAPE);
  cr_expect_eq(tensor_gelu_forward(ctx, NULL, &A), STRATA_EINVAL);
  cr_expect_eq(tensor_matmul(NULL, &Cm, &A, &Bok, 0, 0, 1.f, 0.f), STRATA_EINVAL);
  tensor_t q = tensor_view3(a, TENSOR_F32, TENSOR_CPU, 1, 2, 12), o = tensor_view3(b, TENSOR_F32, TENSOR_CPU, 1, 2, 4);
  tensor_t l = tensor_view3(c, TENSOR_F32, TENSOR_CPU, 1, 3, 2);
  cr_expect_eq(tensor_attention_forward(ctx, &o, &l, &q, 3), STRATA_ESHAPE, "4 channels, 3 heads");
  cr_expect(strstr(tensor_last_error(ctx), "3 heads") != NULL, "%s", tensor_last_error(ctx));
  int64_t bad[2] = {3, -1};
  tensor_t t;
  cr_expect_eq(tensor_alloc(ctx, &t, TENSOR_F32, TENSOR_CPU, 2, bad), STRATA_ESHAPE);
  cr_expect_eq(tensor_alloc(ctx, &t, TENSOR_F32, TENSOR_CPU, 5, bad), STRATA_ESHAPE);
#if !defined(STRATA_CUDA)
  int64_t ok[1] = {4};
  cr_expect_eq(tensor_alloc(ctx, &t, TENSOR_F32, 0, 1, ok), STRATA_EUNSUPPORTED);
#endif
  cr_expect_str_eq(tensor_strerror(STRATA_ESHAPE), "shape, dtype or device mismatch");
}

/* tensor_zero over sizes around its paths: memset below 4 MiB, threaded
 * memset, and non-temporal stores beyond the last-level cache (up to 256
 * MiB here), on a buffer that starts and ends off the 32-byte alignment the
 * streamed stores need. Every byte in range becomes 0; the guard bytes on
 * both sides keep their value. */
Test(core, zero_every_size_and_alignment) {
  size_t sizes[] = {12, 3u << 20, 9u << 20, (size_t)300 << 20};
  for (int k = 0; k < 4; k++) {
    size_t n = sizes[k] / 4 + 3; /* floats, not a multiple of 8 */
    float *buf = malloc((n + 16) * sizeof(float));
    cr_assert_not_null(buf);
    for (size_t i = 0; i < n + 16; i++) buf[i] = 1.f;
    tensor_t t = tensor_view1(buf + 5, TENSOR_F32, TENSOR_CPU, (int64_t)n); /* 20 bytes off */
    cr_assert_eq(tensor_zero(ctx, &t), 0);
    size_t bad = 0;
    for (size_t i = 0; i < n + 16; i++) bad += buf[i] != (i >= 5 && i < n + 5 ? 0.f : 1.f);
    cr_expect_eq(bad, 0, "%zu bytes: %zu floats wrong", n * 4, bad);
    free(buf);
  }
}

/* The spec-sheet bf16 peaks the runner's MFU divides by (tensor.h cites the
 * sheets): names as cudaGetDeviceProperties reports them on these GPUs. */
Test(core, device_table_peaks) {
  cr_expect_eq(tensor_cuda_table_peak("NVIDIA H100 80GB HBM3"), 989.4e12);
  cr_expect_eq(tensor_cuda_table_peak("NVIDIA H100 PCIe"), 756.5e12);
  cr_expect_eq(tensor_cuda_table_peak("NVIDIA H200"), 989.4e12);
  cr_expect_eq(tensor_cuda_table_peak("NVIDIA A100-SXM4-80GB"), 312e12);
  cr_expect_eq(tensor_cuda_table_peak("NVIDIA L40S"), 362.05e12);
  cr_expect_eq(tensor_cuda_table_peak("NVIDIA GeForce RTX 4090"), 165.2e12);
  cr_expect_eq(tensor_cuda_table_peak("NVIDIA H100 NVL"), 0, "other clocks: measured instead");
  cr_expect_eq(tensor_cuda_table_peak("NVIDIA H200 NVL"), 0);
  cr_expect_eq(tensor_cuda_table_peak("Tesla V100-SXM2-32GB"), 0, "no bf16 tensor cores");
  cr_expect_eq(tensor_cuda_table_peak(NULL), 0);
  char name[64] = "x";
  if (tensor_cuda_device_count() == 0) {
    cr_expect_eq(tensor_cuda_device_name(0, name, sizeof name), STRATA_EUNSUPPORTED);
    cr_expect_str_empty(name);
  }
  cr_expect_eq(tensor_cuda_device_name(-1, name, sizeof name), STRATA_EINVAL);
}
