/* Double-precision reference optimizers for liboptim's tests, written from
 * the papers' formulas directly (not from liboptim's factored kernels):
 * bias-corrected moments as m / (1 - b1^t), trust ratios from norms of the
 * double-precision state. Also a small deterministic RNG and comparisons. */
#ifndef OPTIM_TEST_REF_H
#define OPTIM_TEST_REF_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/optim.h>

/* xorshift64*: uniform in [-1, 1). */
typedef struct {
  uint64_t s;
} rng_t;
static inline double rng_uniform(rng_t *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  uint64_t x = r->s * 2685821657736338717ull;
  return (double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static inline void rng_fill(rng_t *r, float *x, size_t n, double scale) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(scale * rng_uniform(r));
}

/* One tensor of the reference: double state, started from the float values. */
typedef struct {
  size_t n;
  double *p, *m, *v;
} ref_tensor;

static inline ref_tensor ref_new(const float *p0, size_t n) {
  ref_tensor r = {n, calloc(n ? n : 1, sizeof(double)), calloc(n ? n : 1, sizeof(double)),
                  calloc(n ? n : 1, sizeof(double))};
  for (size_t i = 0; i < n; i++)
    r.p[i] = p0[i];
  return r;
}
static inline void ref_free(ref_tensor *r) {
  free(r->p);
  free(r->m);
  free(r->v);
}

/* SGD with momentum mu and L2 weight decay, PyTorch's reformulation of
 * Sutskever et al. 2013: b_t = mu b_{t-1} + d_t (b_0 = 0), Nesterov
 * direction d_t + mu b_t. */
static inline void ref_sgd(ref_tensor *r, const float *g, double gs, const optim_group *h,
                           double lr) {
  for (size_t i = 0; i < r->n; i++) {
    double d = gs * g[i] + h->weight_decay * r->p[i];
    double dir = d;
    if (h->momentum > 0) {
      r->m[i] = h->momentum * r->m[i] + d;
      dir = h->nesterov ? d + h->momentum * r->m[i] : r->m[i];
    }
    r->p[i] -= lr * dir;
  }
}

/* m^, v^ of Adam (Kingma & Ba, Algorithm 1) at step t; returns the Adam
 * direction m^ / (sqrt(v^) + eps) of element i after advancing m, v. */
static inline double ref_adam_dir(ref_tensor *r, size_t i, double g, const optim_group *h, long t) {
  double b1 = h->beta1, b2 = h->beta2;
  r->m[i] = b1 * r->m[i] + (1 - b1) * g;
  r->v[i] = b2 * r->v[i] + (1 - b2) * g * g;
  double mh = r->m[i], vh = r->v[i];
  if (h->bias_correction) {
    mh /= 1 - pow(b1, (double)t);
    vh /= 1 - pow(b2, (double)t);
  }
  return mh / (sqrt(vh) + h->eps);
}

/* AdamW, Loshchilov & Hutter Algorithm 2 line 12 with lr = eta_t alpha. */
static inline void ref_adamw(ref_tensor *r, const float *g, double gs, const optim_group *h,
                             double lr, long t) {
  for (size_t i = 0; i < r->n; i++) {
    double u = ref_adam_dir(r, i, gs * g[i], h, t) + h->weight_decay * r->p[i];
    r->p[i] -= lr * u;
  }
}

/* LAMB, You et al. 2020 Algorithm 2, one tensor: returns the trust ratio. */
static inline double ref_lamb(ref_tensor *r, const float *g, double gs, const optim_group *h,
                              double lr, long t) {
  double *u = malloc((r->n ? r->n : 1) * sizeof *u);
  double xn = 0, un = 0;
  for (size_t i = 0; i < r->n; i++) {
    u[i] = ref_adam_dir(r, i, gs * g[i], h, t) + h->weight_decay * r->p[i];
    xn += r->p[i] * r->p[i];
    un += u[i] * u[i];
  }
  xn = sqrt(xn);
  un = sqrt(un);
  double trust = 1.0;
  if (h->adapt && xn > 0 && un > 0) {
    double phi = fmax(xn, h->phi_min);
    if (h->phi_max > 0) phi = fmin(phi, h->phi_max);
    trust = phi / un;
  }
  for (size_t i = 0; i < r->n; i++)
    r->p[i] -= lr * trust * u[i];
  free(u);
  return trust;
}

/* LARS, You, Gitman & Ginsburg 2017 Algorithm 1, one tensor. */
static inline double ref_lars(ref_tensor *r, const float *g, double gs, const optim_group *h,
                              double lr) {
  double wn = 0, gn = 0;
  for (size_t i = 0; i < r->n; i++) {
    wn += r->p[i] * r->p[i];
    gn += (gs * g[i]) * (gs * g[i]);
  }
  wn = sqrt(wn);
  gn = sqrt(gn);
  double local = 1.0;
  if (h->adapt && wn > 0 && gn > 0) local = h->trust_coef * wn / (gn + h->weight_decay * wn);
  for (size_t i = 0; i < r->n; i++) {
    double d = lr * local * (gs * g[i] + h->weight_decay * r->p[i]);
    if (h->momentum > 0) {
      r->m[i] = h->momentum * r->m[i] + d;
      d = r->m[i];
    }
    r->p[i] -= d;
  }
  return local;
}

/* |x - ref| <= atol + rtol |ref| for every element; names the first miss. */
static inline void expect_close(const float *x, const double *ref, size_t n, double rtol,
                                double atol, const char *what) {
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)x[i] - ref[i]);
    if (!(e <= atol + rtol * fabs(ref[i])))
      cr_assert_fail("%s: element %zu is %.9g, reference %.9g (error %.3g > %.3g)", what, i,
                     (double)x[i], ref[i], e, atol + rtol * fabs(ref[i]));
  }
}

/* Distance in units in the last place between two floats of one sign. */
static inline long ulp_diff(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, 4);
  memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return labs((long)ia - (long)ib);
}

static inline void expect_ulps(const float *x, const float *y, size_t n, long maxulp,
                               const char *what) {
  for (size_t i = 0; i < n; i++) {
    long d = ulp_diff(x[i], y[i]);
    if (d > maxulp)
      cr_assert_fail("%s: element %zu: %.9g vs %.9g, %ld ulp apart (max %ld)", what, i,
                     (double)x[i], (double)y[i], d, maxulp);
  }
}

#endif
