/* Each optimizer over several steps against the double-precision reference
 * of ref.h, with two parameter groups (the second excluded from weight decay
 * and layer adaptation, as biases and norms are), on several tensor sizes
 * (one large enough for the threaded path).
 *
 * Tolerance: liboptim computes in fp32. Per step an element's update
 * lr * u carries a relative error of a few ulp (about ten fp32 operations,
 * the rounded bias-correction and trust coefficients, the fp32 moments), and
 * storing p rounds it by half an ulp. Over 6 steps with |p| ~ 1 that is
 * below 6 (2^-24 |p| + 10 * 2^-24 lr |u|) ~ 1e-6: rtol = atol = 4e-6 leaves
 * room, while any real mistake (a missing bias correction, weight decay on
 * the excluded group, a wrong trust ratio) moves p by >= 1e-4. */
#include <strata/half.h>

#include "ref.h"

#define NT 4
static const size_t sizes[NT] = {1000, 37, 50000, 5};
static const int groups[NT] = {0, 1, 0, 1};
#define STEPS 6
#define RTOL 4e-6
#define ATOL 4e-6

typedef struct {
  float *p, *g, *m, *v;
  ref_tensor r;
} tensor;

/* Runs STEPS steps of kind with groups g0, g1 on threads/isa and compares
 * with the reference after every step; returns nothing, asserts. */
static void run_case(int kind, optim_group g0, optim_group g1, int threads, int isa, double gs,
                     const char *name) {
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = kind;
  cfg.threads = threads;
  cfg.isa = isa;
  optim *o = NULL;
  char err[256];
  int rc = optim_create(&o, &cfg, err, sizeof err);
  cr_assert_eq(rc, 0, "optim_create: %s", err);
  int id0, id1;
  cr_assert_eq(optim_add_group(o, &g0, &id0), 0, "%s", optim_last_error(o));
  cr_assert_eq(optim_add_group(o, &g1, &id1), 0, "%s", optim_last_error(o));
  const optim_group *hp[2] = {&g0, &g1};

  rng_t rng = {0x9e3779b97f4a7c15ull + (uint64_t)kind};
  tensor t[NT];
  optim_tensor ot[NT];
  for (int k = 0; k < NT; k++) {
    size_t n = sizes[k];
    t[k].p = malloc(n * 4);
    t[k].g = malloc(n * 4);
    t[k].m = calloc(n, 4);
    t[k].v = calloc(n, 4);
    rng_fill(&rng, t[k].p, n, 1.0);
    t[k].r = ref_new(t[k].p, n);
    ot[k] = (optim_tensor){
        .param = t[k].p, .grad = t[k].g, .m = t[k].m, .v = t[k].v, .group = groups[k], .n = n};
  }
  for (long s = 1; s <= STEPS; s++) {
    for (int k = 0; k < NT; k++) {
      /* gradients of varied scale per tensor and step */
      rng_fill(&rng, t[k].g, sizes[k], 0.5 * (k + 1) / (double)s);
      const optim_group *h = hp[groups[k]];
      switch (kind) {
      case OPTIM_SGD: ref_sgd(&t[k].r, t[k].g, gs, h, h->lr); break;
      case OPTIM_ADAMW: ref_adamw(&t[k].r, t[k].g, gs, h, h->lr, s); break;
      case OPTIM_LAMB: ref_lamb(&t[k].r, t[k].g, gs, h, h->lr, s); break;
      case OPTIM_LARS: ref_lars(&t[k].r, t[k].g, gs, h, h->lr); break;
      }
    }
    rc = optim_step(o, ot, NT, (float)gs);
    cr_assert_eq(rc, 0, "optim_step: %s", optim_last_error(o));
    cr_assert_eq(optim_get_step(o), s);
    for (int k = 0; k < NT; k++) {
      char what[128];
      snprintf(what, sizeof what, "%s step %ld tensor %d", name, s, k);
      expect_close(t[k].p, t[k].r.p, sizes[k], RTOL, ATOL, what);
    }
  }
  for (int k = 0; k < NT; k++) {
    free(t[k].p);
    free(t[k].g);
    free(t[k].m);
    free(t[k].v);
    ref_free(&t[k].r);
  }
  optim_destroy(o);
}

/* The excluded group: no weight decay, no layer adaptation. */
static optim_group excluded(optim_group g) {
  g.weight_decay = 0.0f;
  g.adapt = 0;
  return g;
}

Test(sgd, plain) {
  optim_group g = optim_group_defaults(OPTIM_SGD);
  g.lr = 0.05f;
  g.weight_decay = 0.01f;
  run_case(OPTIM_SGD, g, excluded(g), 2, OPTIM_ISA_AUTO, 1.0, "sgd");
}

Test(sgd, momentum) {
  optim_group g = optim_group_defaults(OPTIM_SGD);
  g.lr = 0.05f;
  g.momentum = 0.9f;
  g.weight_decay = 1e-3f;
  run_case(OPTIM_SGD, g, excluded(g), 2, OPTIM_ISA_AUTO, 0.5, "momentum");
}

Test(sgd, nesterov) {
  optim_group g = optim_group_defaults(OPTIM_SGD);
  g.lr = 0.05f;
  g.momentum = 0.8f;
  g.nesterov = 1;
  g.weight_decay = 1e-3f;
  run_case(OPTIM_SGD, g, excluded(g), 1, OPTIM_ISA_AUTO, 1.0, "nesterov");
}

Test(adamw, bias_corrected) {
  optim_group g = optim_group_defaults(OPTIM_ADAMW);
  g.lr = 0.01f;
  g.weight_decay = 0.1f;
  run_case(OPTIM_ADAMW, g, excluded(g), 2, OPTIM_ISA_AUTO, 1.0, "adamw");
}

Test(adamw, no_bias_correction) {
  optim_group g = optim_group_defaults(OPTIM_ADAMW);
  g.lr = 0.01f;
  g.beta1 = 0.8f;
  g.beta2 = 0.95f;
  g.eps = 1e-6f;
  g.bias_correction = 0;
  run_case(OPTIM_ADAMW, g, excluded(g), 2, OPTIM_ISA_AUTO, 0.25, "adamw-nobc");
}

Test(adamw, scalar_isa) {
  optim_group g = optim_group_defaults(OPTIM_ADAMW);
  g.lr = 0.01f;
  run_case(OPTIM_ADAMW, g, excluded(g), 2, OPTIM_ISA_SCALAR, 1.0, "adamw-scalar");
}

Test(lamb, trust_ratio) {
  optim_group g = optim_group_defaults(OPTIM_LAMB);
  g.lr = 0.01f;
  g.weight_decay = 0.01f;
  run_case(OPTIM_LAMB, g, excluded(g), 2, OPTIM_ISA_AUTO, 1.0, "lamb");
}

Test(lamb, clamped) {
  optim_group g = optim_group_defaults(OPTIM_LAMB);
  g.lr = 0.01f;
  g.phi_min = 0.5f;
  g.phi_max = 2.0f; /* ||x|| is ~ sqrt(n / 3): clamped to 2 for the big tensors, 0.5 never */
  g.bias_correction = 0;
  run_case(OPTIM_LAMB, g, excluded(g), 2, OPTIM_ISA_SCALAR, 1.0, "lamb-clamp");
}

Test(lars, trust_ratio) {
  optim_group g = optim_group_defaults(OPTIM_LARS);
  g.lr = 1.0f;
  g.weight_decay = 5e-4f;
  run_case(OPTIM_LARS, g, excluded(g), 2, OPTIM_ISA_AUTO, 1.0, "lars");
}

Test(lars, no_momentum) {
  optim_group g = optim_group_defaults(OPTIM_LARS);
  g.lr = 2.0f;
  g.momentum = 0.0f;
  g.trust_coef = 0.01f;
  run_case(OPTIM_LARS, g, excluded(g), 1, OPTIM_ISA_SCALAR, 0.5, "lars-nomom");
}

/* ---- zero norms in the trust ratios: the ratio is 1 ---- */

/* LAMB with x = 0: trust 1, so x = -lr r with r the Adam direction; step 1
 * with bias correction gives r = g / (|g| + eps) exactly in closed form. */
Test(lamb, zero_param_norm) {
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = OPTIM_LAMB;
  optim *o = NULL;
  cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
  optim_group g = optim_group_defaults(OPTIM_LAMB);
  g.lr = 0.1f;
  g.weight_decay = 0.5f;
  int id;
  cr_assert_eq(optim_add_group(o, &g, &id), 0);
  float p[4] = {0}, gr[4] = {1.0f, -2.0f, 0.5f, 0.0f}, m[4] = {0}, v[4] = {0};
  optim_tensor t = {.param = p, .grad = gr, .m = m, .v = v, .group = id, .n = 4};
  cr_assert_eq(optim_step(o, &t, 1, 1.0f), 0, "%s", optim_last_error(o));
  for (int i = 0; i < 4; i++) {
    double r = gr[i] / (fabs(gr[i]) + 1e-6);
    cr_assert_float_eq(p[i], -0.1 * r, 1e-7, "element %d: %g vs %g", i, p[i], -0.1 * r);
  }
  optim_destroy(o);
}

/* LAMB with r = 0 (no gradient, no decay): trust 1 and nothing moves. */
Test(lamb, zero_update_norm) {
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = OPTIM_LAMB;
  optim *o = NULL;
  cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
  optim_group g = optim_group_defaults(OPTIM_LAMB);
  g.weight_decay = 0.0f;
  int id;
  cr_assert_eq(optim_add_group(o, &g, &id), 0);
  float p[3] = {1, 2, 3}, gr[3] = {0}, m[3] = {0}, v[3] = {0};
  optim_tensor t = {.param = p, .grad = gr, .m = m, .v = v, .group = id, .n = 3};
  cr_assert_eq(optim_step(o, &t, 1, 1.0f), 0, "%s", optim_last_error(o));
  cr_assert(p[0] == 1 && p[1] == 2 && p[2] == 3);
  optim_destroy(o);
}

/* LARS with g = 0: local lr 1, so w -= lr wd w; with w = 0: w = -lr g. */
Test(lars, zero_norms) {
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = OPTIM_LARS;
  optim *o = NULL;
  cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
  optim_group g = optim_group_defaults(OPTIM_LARS);
  g.lr = 0.5f;
  g.weight_decay = 0.1f;
  g.momentum = 0.0f;
  int id;
  cr_assert_eq(optim_add_group(o, &g, &id), 0);
  float w1[2] = {1.0f, -2.0f}, g1[2] = {0}, w2[2] = {0}, g2[2] = {3.0f, -4.0f};
  optim_tensor t[2] = {{.param = w1, .grad = g1, .group = id, .n = 2},
                       {.param = w2, .grad = g2, .group = id, .n = 2}};
  cr_assert_eq(optim_step(o, t, 2, 1.0f), 0, "%s", optim_last_error(o));
  cr_assert_float_eq(w1[0], 1.0f - 0.5f * 0.1f * 1.0f, 1e-7);
  cr_assert_float_eq(w1[1], -2.0f + 0.5f * 0.1f * 2.0f, 1e-7);
  cr_assert_float_eq(w2[0], -0.5f * 3.0f, 1e-7);
  cr_assert_float_eq(w2[1], 0.5f * 4.0f, 1e-7);
  optim_destroy(o);
}

/* ---- the low-precision copy written in the same pass ---- */

static void lowp_case(int kind, int dtype, int isa) {
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = kind;
  cfg.isa = isa;
  cfg.threads = 2;
  optim *o = NULL;
  cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
  optim_group g = optim_group_defaults(kind);
  g.momentum = kind == OPTIM_SGD ? 0.9f : g.momentum;
  int id;
  cr_assert_eq(optim_add_group(o, &g, &id), 0);
  const size_t n = 40000;
  float *p = malloc(n * 4), *gr = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4);
  uint16_t *h = calloc(n, 2);
  rng_t rng = {12345};
  for (size_t i = 0; i < n; i++) {
    /* magnitudes from 2^-30 to 2^20: f16 subnormals, normals and overflow */
    double e = ldexp(1.0, (int)(i % 51) - 30);
    p[i] = (float)(e * rng_uniform(&rng));
  }
  p[0] = 65519.0f; /* rounds to 65504 in f16 */
  p[1] = 65520.0f; /* rounds to inf in f16 */
  p[2] = -0.0f;
  rng_fill(&rng, gr, n, 1e-3);
  optim_tensor t = {
      .param = p, .grad = gr, .m = m, .v = v, .lowp = h, .lowp_dtype = dtype, .group = id, .n = n};
  for (int s = 0; s < 2; s++)
    cr_assert_eq(optim_step(o, &t, 1, 1.0f), 0, "%s", optim_last_error(o));
  for (size_t i = 0; i < n; i++) {
    uint16_t want = dtype == OPTIM_LOWP_BF16 ? strata_f32_to_bf16(p[i]) : strata_f32_to_f16(p[i]);
    if (h[i] != want)
      cr_assert_fail("kind %d dtype %d isa %d element %zu: p = %.9g, copy 0x%04x, expected 0x%04x",
                     kind, dtype, isa, i, (double)p[i], h[i], want);
  }
  free(p);
  free(gr);
  free(m);
  free(v);
  free(h);
  optim_destroy(o);
}

Test(lowp, bf16_and_f16_copies) {
  const int kinds[] = {OPTIM_SGD, OPTIM_ADAMW, OPTIM_LAMB, OPTIM_LARS};
  for (int k = 0; k < 4; k++)
    for (int d = OPTIM_LOWP_BF16; d <= OPTIM_LOWP_F16; d++) {
      lowp_case(kinds[k], d, OPTIM_ISA_AUTO);
      lowp_case(kinds[k], d, OPTIM_ISA_SCALAR);
    }
}

/* ---- ISAs agree: the scalar build is the reference of the vector ones ---- */

/* Same source, different vector widths: FMA contraction may differ, so
 * allow 2 ulp after 3 steps (an update step is ~1e-3 of |p|; a contraction
 * difference is an ulp of the update). */
Test(isa, vector_matches_scalar) {
  const int kinds[] = {OPTIM_SGD, OPTIM_ADAMW, OPTIM_LAMB, OPTIM_LARS};
  const size_t n = 70001;
  for (int k = 0; k < 4; k++) {
    float *ps[2], *ms[2], *vs[2];
    float *gr = malloc(n * 4);
    rng_t rng = {777};
    rng_fill(&rng, gr, n, 1.0);
    for (int a = 0; a < 2; a++) {
      optim_config cfg = OPTIM_CONFIG_DEFAULTS;
      cfg.kind = kinds[k];
      cfg.isa = a == 0 ? OPTIM_ISA_SCALAR : OPTIM_ISA_AUTO;
      cfg.threads = 2;
      optim *o = NULL;
      cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
      optim_group g = optim_group_defaults(kinds[k]);
      g.momentum = 0.9f;
      int id;
      cr_assert_eq(optim_add_group(o, &g, &id), 0);
      ps[a] = malloc(n * 4);
      ms[a] = calloc(n, 4);
      vs[a] = calloc(n, 4);
      rng_t r2 = {4242};
      rng_fill(&r2, ps[a], n, 1.0);
      optim_tensor t = {.param = ps[a], .grad = gr, .m = ms[a], .v = vs[a], .group = id, .n = n};
      for (int s = 0; s < 3; s++)
        cr_assert_eq(optim_step(o, &t, 1, 0.5f), 0, "%s", optim_last_error(o));
      optim_destroy(o);
    }
    expect_ulps(ps[0], ps[1], n, 2, "params, scalar vs vector");
    for (int a = 0; a < 2; a++) {
      free(ps[a]);
      free(ms[a]);
      free(vs[a]);
    }
    free(gr);
  }
}

/* The vectorised conversions against strata/half.h over a sweep of 2^20 bit
 * patterns (every 4096th float: zeros, subnormals, normals on both sides of
 * each rounding edge, f16 overflow, inf, nan), through an SGD step with
 * lr = 0 on every ISA; the copy must be the rounding of the final p. */
Test(lowp, conversion_sweep) {
  const size_t n = (size_t)1 << 20;
  float *p = malloc(n * 4), *g = calloc(n, 4);
  uint16_t *h = malloc(n * 2);
  const int isas[] = {OPTIM_ISA_SCALAR, OPTIM_ISA_AUTO};
  for (int a = 0; a < 2; a++)
    for (int dt = OPTIM_LOWP_BF16; dt <= OPTIM_LOWP_F16; dt++) {
      for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)(i << 12) | (uint32_t)(i & 0xfff);
        memcpy(&p[i], &u, 4);
      }
      optim_config cfg = OPTIM_CONFIG_DEFAULTS;
      cfg.kind = OPTIM_SGD;
      cfg.isa = isas[a];
      cfg.threads = 2;
      optim *o = NULL;
      cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
      optim_group gr = optim_group_defaults(OPTIM_SGD);
      gr.lr = 0.0f;
      int id;
      cr_assert_eq(optim_add_group(o, &gr, &id), 0);
      optim_tensor t = {.param = p, .grad = g, .lowp = h, .lowp_dtype = dt, .group = id, .n = n};
      cr_assert_eq(optim_step(o, &t, 1, 1.0f), 0);
      for (size_t i = 0; i < n; i++) {
        uint16_t want = dt == OPTIM_LOWP_BF16 ? strata_f32_to_bf16(p[i]) : strata_f32_to_f16(p[i]);
        if (h[i] != want)
          cr_assert_fail("isa %d dtype %d: p = %a (0x%08x): copy 0x%04x, expected 0x%04x", isas[a],
                         dt, (double)p[i], (unsigned)((i << 12) | (i & 0xfff)), h[i], want);
      }
      optim_destroy(o);
    }
  free(p);
  free(g);
  free(h);
}
