/* CPU range kernels of liboptim, one body per operation compiled for three
 * instruction sets: scalar (no vectorisation, the reference), AVX2 + FMA
 * (the build's x86-64-v3 baseline) and AVX-512 (run-time dispatch only).
 *
 * Each body is an always-inline function; the per-ISA wrappers differ only in
 * their target attributes, so the compiler vectorises the same source for
 * each. Element-wise loops vectorise on their own (restrict pointers,
 * -fno-math-errno for sqrtf); loops that also sum squares use
 * `omp simd reduction` in double. Every operation is one pass over memory:
 * memory bandwidth, not arithmetic, bounds them. */
#include <math.h>
#include <string.h>

#include <strata/optim.h>

#include "internal.h"

#define INLINE static inline __attribute__((always_inline))
#define SCALAR_ATTR __attribute__((optimize("no-tree-vectorize")))
#define AVX512_ATTR                                                                                \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,prefer-vector-width=512")))

/* f32 -> bf16, round to nearest even, NaN kept quiet: strata_f32_to_bf16
 * written without a branch so that it vectorises. */
INLINE uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t q = (u >> 16) | 0x40u;
  return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? q : r);
}

/* f32 -> f16, round to nearest even; the same results as strata_f32_to_f16
 * (NaN payloads aside), computed without branches so that it vectorises
 * (after F. Giesen's float_to_half_fast3_rtne). */
INLINE uint16_t to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = x & 0x80000000u;
  x ^= sign;
  /* >= 65536 (after rounding always inf), inf or nan. Masks, not ?:, so
   * that the compiler does not sink the fp add below into a branch (it may
   * not speculate a trapping op) and gives up vectorising. */
  uint32_t big = 0x7c00u | ((uint32_t) - (int32_t)(x > 0x7f800000u) & 0x0200u);
  /* below the smallest normal f16: let an fp add against 0.5f round it */
  float t, d;
  memcpy(&t, &x, 4);
  d = t + 0.5f;
  uint32_t dbits;
  memcpy(&dbits, &d, 4);
  uint32_t sub = dbits - 0x3f000000u;
  /* normal: rebias and round to nearest even on the dropped 13 bits */
  uint32_t nrm = (x + 0xc8000fffu + ((x >> 13) & 1u)) >> 13;
  uint32_t is_big = (uint32_t) - (int32_t)(x >= 0x47800000u);
  uint32_t is_sub = (uint32_t) - (int32_t)(x < 0x38800000u);
  uint32_t o = (big & is_big) | (sub & is_sub) | (nrm & ~(is_big | is_sub));
  return (uint16_t)(o | (sign >> 16));
}

INLINE void store_lowp(void *lowp, size_t i, float x, const int dt) {
  if (dt == OPTIM_LOWP_BF16)
    ((uint16_t *)lowp)[i] = to_bf16(x);
  else if (dt == OPTIM_LOWP_F16)
    ((uint16_t *)lowp)[i] = to_f16(x);
}

/* LOOP(args..., dt) with the low-precision copy's dtype j->lowp_dtype as a
 * constant (1 bf16, 2 f16, 0 none), so that each store variant compiles into
 * its own loop with no test per element. */
#define LOWP_DISPATCH(j, LOOP, ...)                                                                \
  do {                                                                                             \
    const int dt_ = (j)->lowp ? (j)->lowp_dtype : OPTIM_LOWP_NONE;                                 \
    if (dt_ == OPTIM_LOWP_BF16)                                                                    \
      LOOP(__VA_ARGS__, 1);                                                                        \
    else if (dt_ == OPTIM_LOWP_F16)                                                                \
      LOOP(__VA_ARGS__, 2);                                                                        \
    else                                                                                           \
      LOOP(__VA_ARGS__, 0);                                                                        \
  } while (0)

/* ---- SGD: d = g + wd p; b = mu b + d; p -= lr (nesterov ? d + mu b : b) ---- */
INLINE void sgd_loop(const optim_job *j, size_t a, size_t b, const int has_m, const int nest,
                     const int dt) {
  float *restrict p = j->p, *restrict m = j->m;
  const float *restrict g = j->g;
  void *restrict lowp = j->lowp;
  const float lr = j->lr, wd = j->wd, gs = j->gs, mu = j->b1;
  for (size_t i = a; i < b; i++) {
    float pi = p[i];
    float d = gs * g[i] + wd * pi;
    float dir = d;
    if (has_m) {
      float bi = mu * m[i] + d;
      m[i] = bi;
      dir = nest ? d + mu * bi : bi;
    }
    pi = pi - lr * dir;
    p[i] = pi;
    store_lowp(lowp, i, pi, dt);
  }
}

INLINE void sgd_body(const optim_job *j, size_t a, size_t b, double *s) {
  const int has_m = j->m != NULL;
  (void)s;
#define SGD_CASE(HM, NE)                                                                           \
  if (has_m == HM && (j->nesterov != 0) == NE) {                                                   \
    LOWP_DISPATCH(j, sgd_loop, j, a, b, HM, NE);                                                   \
    return;                                                                                        \
  }
  SGD_CASE(0, 0)
  SGD_CASE(1, 0)
  SGD_CASE(1, 1)
  SGD_CASE(0, 1)
#undef SGD_CASE
}

/* ---- AdamW: one pass reading p, g, m, v and writing p, m, v (+ lowp) ---- */
INLINE void adamw_loop(const optim_job *j, size_t a, size_t b, const int dt) {
  float *restrict p = j->p, *restrict m = j->m, *restrict v = j->v;
  const float *restrict g = j->g;
  void *restrict lowp = j->lowp;
  const float lr = j->lr, wd = j->wd, gs = j->gs, b1 = j->b1, b2 = j->b2;
  const float ob1 = 1.0f - b1, ob2 = 1.0f - b2, c1 = j->c1, c2 = j->c2, eps = j->eps;
  for (size_t i = a; i < b; i++) {
    float gi = gs * g[i], pi = p[i];
    float mi = b1 * m[i] + ob1 * gi;
    float vi = b2 * v[i] + ob2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float u = (mi * c1) / (sqrtf(vi) * c2 + eps) + wd * pi;
    pi = pi - lr * u;
    p[i] = pi;
    store_lowp(lowp, i, pi, dt);
  }
}

INLINE void adamw_body(const optim_job *j, size_t a, size_t b, double *s) {
  (void)s;
  LOWP_DISPATCH(j, adamw_loop, j, a, b);
}

/* ---- LAMB phase one: m, v advanced; sums ||x||^2 and ||r||^2 ---- */
INLINE float lamb_parts_elem(const optim_job *j, size_t i, float *r2) {
  float gi = j->gs * j->g[i], pi = j->p[i];
  float mi = j->b1 * j->m[i] + (1.0f - j->b1) * gi;
  float vi = j->b2 * j->v[i] + (1.0f - j->b2) * gi * gi;
  j->m[i] = mi;
  j->v[i] = vi;
  float r = (mi * j->c1) / (sqrtf(vi) * j->c2 + j->eps) + j->wd * pi;
  *r2 = r;
  return pi;
}

INLINE void lamb_parts_vec(const optim_job *j, size_t a, size_t b, double *s) {
  float *restrict p = j->p, *restrict m = j->m, *restrict v = j->v;
  const float *restrict g = j->g;
  const float wd = j->wd, gs = j->gs, b1 = j->b1, b2 = j->b2;
  const float ob1 = 1.0f - b1, ob2 = 1.0f - b2, c1 = j->c1, c2 = j->c2, eps = j->eps;
  double s0 = 0.0, s1 = 0.0;
#pragma omp simd reduction(+ : s0, s1)
  for (size_t i = a; i < b; i++) {
    float gi = gs * g[i], pi = p[i];
    float mi = b1 * m[i] + ob1 * gi;
    float vi = b2 * v[i] + ob2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float r = (mi * c1) / (sqrtf(vi) * c2 + eps) + wd * pi;
    s0 += (double)pi * (double)pi;
    s1 += (double)r * (double)r;
  }
  s[0] += s0;
  s[1] += s1;
}

INLINE void lamb_parts_ref(const optim_job *j, size_t a, size_t b, double *s) {
  double s0 = 0.0, s1 = 0.0;
  for (size_t i = a; i < b; i++) {
    float r;
    float pi = lamb_parts_elem(j, i, &r);
    s0 += (double)pi * (double)pi;
    s1 += (double)r * (double)r;
  }
  s[0] += s0;
  s[1] += s1;
}

/* ---- LAMB phase two: x -= lr trust r, r recomputed from m, v ---- */
INLINE void lamb_loop(const optim_job *j, size_t a, size_t b, const int dt) {
  float *restrict p = j->p;
  const float *restrict m = j->m, *restrict v = j->v;
  void *restrict lowp = j->lowp;
  const float lr = j->lr, wd = j->wd, c1 = j->c1, c2 = j->c2, eps = j->eps;
  for (size_t i = a; i < b; i++) {
    float pi = p[i];
    float r = (m[i] * c1) / (sqrtf(v[i]) * c2 + eps) + wd * pi;
    pi = pi - lr * r;
    p[i] = pi;
    store_lowp(lowp, i, pi, dt);
  }
}

INLINE void lamb_body(const optim_job *j, size_t a, size_t b, double *s) {
  (void)s;
  LOWP_DISPATCH(j, lamb_loop, j, a, b);
}

/* ---- LARS phase one: ||w||^2, ||gs g||^2; and the plain ||g||^2 ---- */
INLINE void sumsq2_vec(const float *restrict x, const float *restrict y, float ys, size_t a,
                       size_t b, double *s) {
  double s0 = 0.0, s1 = 0.0;
#pragma omp simd reduction(+ : s0, s1)
  for (size_t i = a; i < b; i++) {
    float yi = ys * y[i];
    s0 += (double)x[i] * (double)x[i];
    s1 += (double)yi * (double)yi;
  }
  s[0] += s0;
  s[1] += s1;
}

INLINE void sumsq2_scalar(const float *restrict x, const float *restrict y, float ys, size_t a,
                          size_t b, double *s) {
  double s0 = 0.0, s1 = 0.0;
  for (size_t i = a; i < b; i++) {
    float yi = ys * y[i];
    s0 += (double)x[i] * (double)x[i];
    s1 += (double)yi * (double)yi;
  }
  s[0] += s0;
  s[1] += s1;
}

INLINE void sumsq_vec(const float *restrict x, size_t a, size_t b, double *s) {
  double s0 = 0.0;
#pragma omp simd reduction(+ : s0)
  for (size_t i = a; i < b; i++)
    s0 += (double)x[i] * (double)x[i];
  s[0] += s0;
}

INLINE void sumsq_scalar(const float *restrict x, size_t a, size_t b, double *s) {
  double s0 = 0.0;
  for (size_t i = a; i < b; i++)
    s0 += (double)x[i] * (double)x[i];
  s[0] += s0;
}

/* ---- LARS phase two: b = mu b + lr local (g + wd w); w -= b ---- */
INLINE void lars_loop(const optim_job *j, size_t a, size_t b, const int has_m, const int dt) {
  float *restrict p = j->p, *restrict m = j->m;
  const float *restrict g = j->g;
  void *restrict lowp = j->lowp;
  const float lr = j->lr, wd = j->wd, gs = j->gs, mu = j->b1;
  for (size_t i = a; i < b; i++) {
    float pi = p[i];
    float d = lr * (gs * g[i] + wd * pi);
    if (has_m) {
      d = mu * m[i] + d;
      m[i] = d;
    }
    pi = pi - d;
    p[i] = pi;
    store_lowp(lowp, i, pi, dt);
  }
}

INLINE void lars_body(const optim_job *j, size_t a, size_t b, double *s) {
  (void)s;
  if (j->m)
    LOWP_DISPATCH(j, lars_loop, j, a, b, 1);
  else
    LOWP_DISPATCH(j, lars_loop, j, a, b, 0);
}

/* ---- per-ISA wrappers ---- */
#define VARIANTS(NAME, VECBODY, SCALARBODY)                                                        \
  static SCALAR_ATTR void NAME##_scalar(const optim_job *j, size_t a, size_t b, double *s) {       \
    SCALARBODY(j, a, b, s);                                                                        \
  }                                                                                                \
  static void NAME##_avx2(const optim_job *j, size_t a, size_t b, double *s) {                     \
    VECBODY(j, a, b, s);                                                                           \
  }                                                                                                \
  static AVX512_ATTR void NAME##_avx512(const optim_job *j, size_t a, size_t b, double *s) {       \
    VECBODY(j, a, b, s);                                                                           \
  }

INLINE void lars_parts_vec(const optim_job *j, size_t a, size_t b, double *s) {
  sumsq2_vec(j->p, j->g, j->gs, a, b, s);
}
INLINE void lars_parts_ref(const optim_job *j, size_t a, size_t b, double *s) {
  sumsq2_scalar(j->p, j->g, j->gs, a, b, s);
}
INLINE void grad_sumsq_vec(const optim_job *j, size_t a, size_t b, double *s) {
  sumsq_vec(j->g, a, b, s);
}
INLINE void grad_sumsq_ref(const optim_job *j, size_t a, size_t b, double *s) {
  sumsq_scalar(j->g, a, b, s);
}

VARIANTS(sgd, sgd_body, sgd_body)
VARIANTS(adamw, adamw_body, adamw_body)
VARIANTS(lamb_parts, lamb_parts_vec, lamb_parts_ref)
VARIANTS(lamb, lamb_body, lamb_body)
VARIANTS(lars_parts, lars_parts_vec, lars_parts_ref)
VARIANTS(lars, lars_body, lars_body)
VARIANTS(grad_sumsq, grad_sumsq_vec, grad_sumsq_ref)

#define TABLE(SUFFIX)                                                                              \
  {                                                                                                \
    sgd_##SUFFIX, adamw_##SUFFIX, lamb_parts_##SUFFIX, lamb_##SUFFIX, lars_parts_##SUFFIX,         \
        lars_##SUFFIX, grad_sumsq_##SUFFIX                                                         \
  }

const optim_range_fn optim_kernels_scalar[OP_COUNT] = TABLE(scalar);
const optim_range_fn optim_kernels_avx2[OP_COUNT] = TABLE(avx2);
const optim_range_fn optim_kernels_avx512[OP_COUNT] = TABLE(avx512);

int optim_cpu_has_avx512(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
}
