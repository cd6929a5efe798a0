/* Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC'11, section 3.2 and its
 * table of round constants). Every element draws from its own counter
 * (global index, stream), so any shard reproduces the whole tensor's values. */
#define _GNU_SOURCE /* sincosf */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_internal.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void tensor_philox(uint32_t out[4], const uint32_t key[2], const uint32_t ctr[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

void tensor_philox_elem(uint32_t out[4], const uint32_t key[2], uint64_t index, uint32_t stream) {
  uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), stream, 0};
  tensor_philox(out, key, ctr);
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void tensor_rng_key(uint32_t key[2], uint64_t seed, const char *name) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the name */
  for (const unsigned char *p = (const unsigned char *)(name ? name : ""); *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ull;
  }
  uint64_t k = splitmix64(splitmix64(seed) ^ h);
  key[0] = (uint32_t)k;
  key[1] = (uint32_t)(k >> 32);
}

static inline float u24(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

enum { DIST_NORMAL, DIST_UNIFORM };

/* Normals come in Box-Muller pairs (Box & Muller 1958): elements 2k and
 * 2k+1 share the counter k and take the cosine and the sine, so each value
 * still depends on its global index only. Float math: 24-bit uniforms carry
 * all the precision a float normal needs; u1 in (0,1] keeps the log finite. */
static inline void normal_pair(const uint32_t key[2], uint64_t k, float *z0, float *z1) {
  uint32_t r[4];
  tensor_philox_elem(r, key, k, 0);
  float u1 = ((float)(r[0] >> 8) + 1.f) * (1.f / 16777216.f), u2 = u24(r[1]);
  float rad = sqrtf(-2.f * logf(u1)), s, c;
  sincosf(6.2831853071795865f * u2, &s, &c);
  *z0 = rad * c;
  *z1 = rad * s;
}

/* Fills out[0..n) with the values of global indices gi .. gi+n-1. */
static void draw_run(float *out, const uint32_t key[2], uint64_t gi, int64_t n, int dist, float a,
                     float b) {
  if (dist == DIST_UNIFORM) {
    for (int64_t j = 0; j < n; j++) {
      uint32_t r[4];
      tensor_philox_elem(r, key, gi + j, 0);
      out[j] = a + (b - a) * u24(r[0]);
    }
    return;
  }
  int64_t j = 0;
  float z0, z1;
  if (gi & 1) { /* odd start: the sine half of a pair */
    normal_pair(key, gi >> 1, &z0, &z1);
    out[j++] = a + b * z1;
  }
  for (; j + 1 < n; j += 2) {
    normal_pair(key, (gi + j) >> 1, &z0, &z1);
    out[j] = a + b * z0;
    out[j + 1] = a + b * z1;
  }
  if (j < n) {
    normal_pair(key, (gi + j) >> 1, &z0, &z1);
    out[j] = a + b * z0;
  }
}

static int fill_rng(tensor_ctx_t *ctx, const char *fn, tensor_t *t, uint64_t seed, const char *name,
                    const tensor_slice_t *slice, int dist, float a, float b) {
  int rc = STRATA_OK;
  char d[96];
  float *host = NULL;
  if (!ctx) return STRATA_EINVAL;
  TRY(tensor_check(ctx, fn, "t", t, TENSOR_F32, 1, TENSOR_MAX_DIMS));
  tensor_slice_t s;
  memset(&s, 0, sizeof s);
  if (slice) {
    s = *slice;
    CHECK(s.ndim == t->ndim, STRATA_ESHAPE, "%s: slice has %d dims, tensor %s", fn, s.ndim,
          tensor_describe(t, d, sizeof d));
    for (int i = 0; i < s.ndim; i++)
      CHECK(s.start[i] >= 0 && s.start[i] + t->shape[i] <= s.shape[i], STRATA_ESHAPE,
            "%s: shard %s starting at %lld in dim %d exceeds the global dim %lld", fn,
            tensor_describe(t, d, sizeof d), (long long)s.start[i], i, (long long)s.shape[i]);
  } else {
    s.ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) s.shape[i] = t->shape[i];
  }
  uint32_t key[2];
  tensor_rng_key(key, seed, name);
  int64_t n = tensor_numel(t), inner = t->shape[t->ndim - 1], rows = n / inner;
  float *out = t->data;
  if (t->device != TENSOR_CPU) {
    host = malloc((size_t)n * sizeof(float));
    CHECK(host, STRATA_ENOMEM, "%s: %lld floats of staging memory", fn, (long long)n);
    out = host;
  }
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (n > 4096)
  for (int64_t r = 0; r < rows; r++) {
    /* Global flat index of the row's first element. */
    int64_t rem = r, gi = 0, gstride = 1, idx[TENSOR_MAX_DIMS] = {0};
    for (int k = s.ndim - 2; k >= 0; k--) {
      idx[k] = rem % t->shape[k];
      rem /= t->shape[k];
    }
    for (int k = s.ndim - 1; k >= 0; k--) {
      gi += (idx[k] + s.start[k]) * gstride;
      gstride *= s.shape[k];
    }
    draw_run(out + r * inner, key, (uint64_t)gi, inner, dist, a, b);
  }
  if (host) {
#if defined(STRATA_CUDA)
    TRY(tcu_memcpy(ctx, t->data, t->device, host, TENSOR_CPU, (size_t)n * sizeof(float)));
#endif
  }
fail:
  free(host);
  return rc;
}

int tensor_fill_normal(tensor_ctx_t *ctx, tensor_t *t, uint64_t seed, const char *name,
                       const tensor_slice_t *slice, float mean, float std) {
  return fill_rng(ctx, "tensor_fill_normal", t, seed, name, slice, DIST_NORMAL, mean, std);
}

int tensor_fill_uniform(tensor_ctx_t *ctx, tensor_t *t, uint64_t seed, const char *name,
                        const tensor_slice_t *slice, float lo, float hi) {
  return fill_rng(ctx, "tensor_fill_uniform", t, seed, name, slice, DIST_UNIFORM, lo, hi);
}

/* ---- dropout ---- */

static int dropout(tensor_ctx_t *ctx, const char *fn, tensor_t *out, const tensor_t *in, float p,
                   uint64_t seed, const char *name, int64_t offset, int accumulate) {
  int rc = STRATA_OK;
  char a[96], b[96];
  if (!ctx) return STRATA_EINVAL;
  TRY(tensor_check(ctx, fn, "out", out, TENSOR_F32, 1, TENSOR_MAX_DIMS));
  TRY(tensor_check(ctx, fn, "in", in, TENSOR_F32, 1, TENSOR_MAX_DIMS));
  TRY(tensor_check_device(ctx, fn, "in", in, out->device));
  CHECK(tensor_numel(out) == tensor_numel(in), STRATA_ESHAPE, "%s: out %s and in %s differ in size",
        fn, tensor_describe(out, a, sizeof a), tensor_describe(in, b, sizeof b));
  CHECK(p >= 0.f && p < 1.f, STRATA_EINVAL, "%s: p = %g not in [0, 1)", fn, (double)p);
  CHECK(offset >= 0, STRATA_EINVAL, "%s: offset %lld < 0", fn, (long long)offset);
  uint32_t key[2];
  tensor_rng_key(key, seed, name);
  int64_t n = tensor_numel(in);
  if (out->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_dropout(ctx, out->data, in->data, n, p, key, offset, accumulate));
#endif
    goto fail;
  }
  float *o = out->data, scale = 1.f / (1.f - p);
  const float *x = in->data;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; i++) {
    uint32_t r[4];
    tensor_philox_elem(r, key, (uint64_t)(offset + i), 0);
    float v = u24(r[0]) >= p ? x[i] * scale : 0.f;
    o[i] = accumulate ? o[i] + v : v;
  }
fail:
  return rc;
}

int tensor_dropout_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *in, float p,
                           uint64_t seed, const char *name, int64_t offset) {
  return dropout(ctx, "tensor_dropout_forward", out, in, p, seed, name, offset, 0);
}

int tensor_dropout_backward(tensor_ctx_t *ctx, tensor_t *din, const tensor_t *dout, float p,
                            uint64_t seed, const char *name, int64_t offset) {
  if (!din) return STRATA_OK;
  return dropout(ctx, "tensor_dropout_backward", din, dout, p, seed, name, offset, 1);
}
