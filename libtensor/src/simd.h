/* Vector exp/tanh for the memory-bound kernels (softmax, cross-entropy, GELU).
 * AVX2 + FMA (x86-64-v3, strata's baseline); a scalar fallback elsewhere.
 * exp: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, and Cephes'
 * degree-5 minimax polynomial for e^r (cephes/single/expf.c); relative error
 * about 2 ulp on [-87, 88]; below -87.3 the result flushes to 0, which is
 * what a masked softmax entry needs. */
#ifndef STRATA_TENSOR_SIMD_H
#define STRATA_TENSOR_SIMD_H

#include <math.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TENSOR_HAVE_AVX2 1

static inline __m256 exp256(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365478515625f);
  x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* tanh u = 1 - 2 / (e^{2u} + 1): saturates correctly at both ends. */
static inline __m256 tanh256(__m256 u) {
  __m256 e = exp256(_mm256_add_ps(u, u));
  return _mm256_sub_ps(_mm256_set1_ps(1.f),
                       _mm256_div_ps(_mm256_set1_ps(2.f), _mm256_add_ps(e, _mm256_set1_ps(1.f))));
}

static inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline float hmax256(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

/* Scalar versions of the same formulas, for tails. */
static inline float tensor_expf(float x) { return expf(x); }
static inline float tensor_tanhf(float x) { return tanhf(x); }

#endif
