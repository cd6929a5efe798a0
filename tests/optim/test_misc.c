/* Schedules, clipping, the dynamic loss scaler (with inf/nan gradients),
 * bad hyper-parameters and device requests. */
#include "ref.h"

/* ---- learning-rate schedules against their closed forms ---- */

Test(schedule, warmup_then_decay) {
  optim_schedule s = {OPTIM_SCHED_POLY, 10, 110, 2.0, 0.1};
  cr_assert_float_eq(optim_schedule_factor(&s, 0), 0.1, 1e-12);
  cr_assert_float_eq(optim_schedule_factor(&s, 4), 0.5, 1e-12);
  cr_assert_float_eq(optim_schedule_factor(&s, 10), 1.0, 1e-12);
  /* q = 0.5: 0.1 + 0.9 * 0.25 */
  cr_assert_float_eq(optim_schedule_factor(&s, 60), 0.325, 1e-12);
  cr_assert_float_eq(optim_schedule_factor(&s, 110), 0.1, 1e-12);
  cr_assert_float_eq(optim_schedule_factor(&s, 500), 0.1, 1e-12);
  s.kind = OPTIM_SCHED_COSINE;
  s.end = 0.0;
  cr_assert_float_eq(optim_schedule_factor(&s, 60), 0.5, 1e-12);
  /* q = 0.25: (1 + cos(pi / 4)) / 2 */
  cr_assert_float_eq(optim_schedule_factor(&s, 35), (1 + sqrt(0.5)) / 2, 1e-12);
  s.kind = OPTIM_SCHED_CONSTANT;
  cr_assert_float_eq(optim_schedule_factor(&s, 3), 0.4, 1e-12);
  cr_assert_float_eq(optim_schedule_factor(&s, 1000), 1.0, 1e-12);
}

/* ---- batch-size warm-up and the learning-rate rules, closed forms ---- */

/* By updates: B(t) = start + quantum floor(n min(1, t / warmup)), n = (end -
 * start) / quantum, evaluated here in double (exact for these small values). */
Test(batch_schedule, by_updates_closed_form) {
  optim_batch_schedule s = {.start = 32, .end = 512, .quantum = 32, .warmup = 100, .seq = 64};
  cr_assert_eq(optim_batch_schedule_check(&s, NULL, 0), 0);
  double tokens = 0;
  for (long t = 0; t <= 130; t++) {
    double q = t < 100 ? t / 100.0 : 1.0;
    long want = 32 + 32 * (long)floor(15 * q);
    cr_assert_eq(optim_batch_at(&s, t), want, "t %ld: %ld, want %ld", t, optim_batch_at(&s, t), want);
    cr_assert_float_eq(optim_batch_tokens_before(&s, t), tokens, 1e-9, "tokens before %ld", t);
    tokens += 64.0 * (double)want;
  }
  cr_assert_eq(optim_batch_at(&s, 0), 32);
  cr_assert_eq(optim_batch_at(&s, 99), 480); /* floor(14.85) = 14 */
  cr_assert_eq(optim_batch_at(&s, 100), 512);
  s.start = s.end; /* no warm-up: the batch is constant */
  cr_assert_eq(optim_batch_at(&s, 0), 512);
  cr_assert_float_eq(optim_batch_tokens_before(&s, 10), 10 * 512 * 64.0, 1e-9);
}

/* By tokens, derived by hand: start 1, end 4, quantum 1, seq 1, warm-up 6
 * tokens (n = 3). Tokens before update t and floor(3 T / 6): t = 0: 0 -> 0,
 * B = 1; t = 1: 1 -> 0, B = 1; t = 2: 2 -> 1, B = 2; t = 3: 4 -> 2, B = 3;
 * t = 4: 7 >= 6, B = 4 from then on. */
Test(batch_schedule, by_tokens_by_hand) {
  optim_batch_schedule s = {.start = 1, .end = 4, .quantum = 1, .warmup_tokens = 6, .seq = 1};
  cr_assert_eq(optim_batch_schedule_check(&s, NULL, 0), 0);
  const long want[] = {1, 1, 2, 3, 4, 4, 4};
  const double before[] = {0, 1, 2, 4, 7, 11, 15};
  for (long t = 0; t < 7; t++) {
    cr_assert_eq(optim_batch_at(&s, t), want[t], "t %ld: %ld", t, optim_batch_at(&s, t));
    cr_assert_float_eq(optim_batch_tokens_before(&s, t), before[t], 1e-12, "t %ld", t);
  }
  /* GPT-3's shape (32 -> 1600 sequences of 2048 over 4e9 tokens, here in
   * multiples of 32): monotone, and the warm-up ends where its tokens do. */
  optim_batch_schedule g = {.start = 32, .end = 1600, .quantum = 32, .warmup_tokens = 4e9, .seq = 2048};
  long prev = 0, t = 0;
  while (optim_batch_at(&g, t) < 1600) {
    long b = optim_batch_at(&g, t);
    cr_assert_geq(b, prev);
    cr_assert_lt(optim_batch_tokens_before(&g, t), 4e9);
    prev = b, t++;
  }
  cr_assert_geq(optim_batch_tokens_before(&g, t), 4e9);
}

Test(batch_schedule, refused) {
  char err[200];
  optim_batch_schedule s = {.start = 48, .end = 512, .quantum = 32, .warmup = 10, .seq = 64};
  cr_assert_eq(optim_batch_schedule_check(&s, err, sizeof err), STRATA_EINVAL);
  cr_assert(strstr(err, "quantum 32 must divide start 48"), "%s", err);
  s.start = 1024;
  cr_assert_eq(optim_batch_schedule_check(&s, err, sizeof err), STRATA_EINVAL);
  s.start = 32, s.warmup_tokens = 1e6;
  cr_assert_eq(optim_batch_schedule_check(&s, err, sizeof err), STRATA_EINVAL);
}

Test(batch_schedule, lr_rules) {
  cr_assert_float_eq(optim_lr_batch_factor(OPTIM_LR_RULE_LINEAR, 2048, 64), 32.0, 1e-15);
  cr_assert_float_eq(optim_lr_batch_factor(OPTIM_LR_RULE_SQRT, 2048, 32), 8.0, 1e-15);
  cr_assert_float_eq(optim_lr_batch_factor(OPTIM_LR_RULE_SQRT, 32, 512), 0.25, 1e-15);
  cr_assert_float_eq(optim_lr_batch_factor(OPTIM_LR_RULE_NONE, 2048, 32), 1.0, 0);
  cr_assert_float_eq(optim_lr_batch_factor(OPTIM_LR_RULE_LINEAR, 0, 32), 1.0, 0);
}

/* Trust ratios from the two sums, by the papers' formulas; and the one
 * optim_apply uses: one LAMB step on x = (3, 4) (||x|| = 5) with a gradient
 * whose Adam direction at t = 1 is sign(g) (m^ / sqrt(v^) = g / |g|, eps
 * aside), r = (1, 1), ||r|| = sqrt 2: x moves by lr 5 / sqrt 2 per unit. */
Test(batch_schedule, trust_ratios) {
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = OPTIM_LAMB;
  optim *o = NULL;
  cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
  optim_group g = optim_group_defaults(OPTIM_LAMB);
  g.weight_decay = 0, g.lr = 0.01f, g.eps = 1e-12f;
  int id, nd;
  cr_assert_eq(optim_add_group(o, &g, &id), 0);
  g.adapt = 0;
  cr_assert_eq(optim_add_group(o, &g, &nd), 0);
  double tr;
  cr_assert_eq(optim_trust_ratio(o, id, 9.0, 0.25, &tr), 0);
  cr_assert_float_eq(tr, 3.0 / 0.5, 1e-12);
  cr_assert_eq(optim_trust_ratio(o, nd, 9.0, 0.25, &tr), 0);
  cr_assert_float_eq(tr, 1.0, 0);
  cr_assert_eq(optim_trust_ratio(o, id, 0.0, 0.25, &tr), 0); /* ||x|| = 0: 1 */
  cr_assert_float_eq(tr, 1.0, 0);
  float x[2] = {3, 4}, gr[2] = {0.5f, 2.0f}, m[2] = {0}, v[2] = {0};
  optim_tensor t = {.param = x, .grad = gr, .m = m, .v = v, .group = id, .n = 2};
  double sums[2];
  cr_assert_eq(optim_partials(o, sums, 2, &t, 1, 1.0f), 0);
  cr_assert_eq(optim_trust_ratio(o, id, sums[0], sums[1], &tr), 0);
  cr_assert_float_eq(tr, 5.0 / sqrt(2.0), 1e-5);
  cr_assert_eq(optim_apply(o, &t, 1, sums, 2, 1.0f), 0);
  /* float32 arithmetic of the update: relative 1e-6 of the step 0.035 */
  cr_assert_float_eq(x[0], 3 - 0.01 * 5 / sqrt(2.0), 1e-6);
  cr_assert_float_eq(x[1], 4 - 0.01 * 5 / sqrt(2.0), 1e-6);
  optim_destroy(o);
  cfg.kind = OPTIM_LARS;
  cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
  optim_group l = optim_group_defaults(OPTIM_LARS); /* eta 1e-3, wd 5e-4 */
  cr_assert_eq(optim_add_group(o, &l, &id), 0);
  cr_assert_eq(optim_trust_ratio(o, id, 4.0, 0.01, &tr), 0);
  cr_assert_float_eq(tr, 1e-3 * 2 / (0.1 + 5e-4 * 2), 1e-9);
  optim_destroy(o);
}

/* The handle applies the schedule: SGD with g = 1 moves p by lr f(t). */
Test(schedule, applied_by_step) {
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = OPTIM_SGD;
  optim *o = NULL;
  cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
  optim_group g = optim_group_defaults(OPTIM_SGD);
  g.lr = 1.0f;
  int id;
  cr_assert_eq(optim_add_group(o, &g, &id), 0);
  optim_schedule s = {OPTIM_SCHED_COSINE, 2, 6, 1.0, 0.0};
  cr_assert_eq(optim_set_schedule(o, &s), 0);
  float p = 0, gr = 1;
  optim_tensor t = {.param = &p, .grad = &gr, .group = id, .n = 1};
  double want = 0;
  for (long k = 0; k < 8; k++) {
    float lr;
    cr_assert_eq(optim_current_lr(o, id, &lr), 0);
    cr_assert_float_eq(lr, optim_schedule_factor(&s, k), 1e-7);
    want -= optim_schedule_factor(&s, k);
    cr_assert_eq(optim_step(o, &t, 1, 1.0f), 0);
    cr_assert_float_eq(p, want, 1e-6, "step %ld: %g vs %g", k, p, want);
  }
  optim_destroy(o);
}

/* ---- clipping ---- */

Test(clip, grad_scale) {
  float gs;
  double norm;
  /* loss scale 8, scaled grads with sum of squares 64 * 25: ||g|| = 5 */
  cr_assert_eq(optim_grad_scale(64.0 * 25.0, 8.0f, 1.0f, &gs, &norm), 0);
  cr_assert_float_eq(norm, 5.0, 1e-12);
  cr_assert_float_eq(gs, (1.0 / 8.0) * (1.0 / (5.0 + 1e-6)), 1e-9);
  /* below the threshold: only unscaled */
  cr_assert_eq(optim_grad_scale(64.0 * 25.0, 8.0f, 10.0f, &gs, NULL), 0);
  cr_assert_float_eq(gs, 0.125, 1e-9);
  cr_assert_eq(optim_grad_scale(64.0, 8.0f, 0.0f, &gs, NULL), 0);
  cr_assert_float_eq(gs, 0.125, 1e-9);
  cr_assert_eq(optim_grad_scale(INFINITY, 8.0f, 1.0f, &gs, &norm), 0);
  cr_assert(gs == 0.0f && isinf(norm));
  cr_assert_eq(optim_grad_scale(NAN, 8.0f, 1.0f, &gs, &norm), 0);
  cr_assert(gs == 0.0f && isnan(norm));
  cr_assert_eq(optim_grad_scale(1.0, 0.0f, 1.0f, &gs, NULL), STRATA_EINVAL);
}

Test(clip, sumsq_detects_nonfinite) {
  optim *o = NULL;
  cr_assert_eq(optim_create(&o, NULL, NULL, 0), 0);
  const size_t n = 50000;
  float *g = malloc(n * 4);
  double want = 0;
  for (size_t i = 0; i < n; i++) {
    g[i] = (float)(i % 7) - 3.0f;
    want += (double)g[i] * g[i];
  }
  optim_tensor t[2] = {{.grad = g, .n = n}, {.grad = g + 10, .n = 3}};
  double s[2];
  cr_assert_eq(optim_grad_sumsq(o, s, t, 2), 0);
  cr_assert_float_eq(s[0], want, 1e-9 * want);
  cr_assert_float_eq(s[1], 0 + 1 + 4, 1e-12); /* g[10..12] = 0, 1, 2 */
  g[n - 1] = INFINITY;
  cr_assert_eq(optim_grad_sumsq(o, s, t, 1), 0);
  cr_assert(!isfinite(s[0]));
  g[n - 1] = NAN;
  cr_assert_eq(optim_grad_sumsq(o, s, t, 1), 0);
  cr_assert(isnan(s[0]));
  free(g);
  optim_destroy(o);
}

/* ---- dynamic loss scaler ---- */

Test(scaler, skip_shrink_grow) {
  optim_scaler *s = NULL;
  optim_scaler_config c = OPTIM_SCALER_DEFAULTS;
  c.init_scale = 1024.0f;
  c.window = 3;
  c.min_scale = 256.0f;
  c.max_scale = 4096.0f;
  cr_assert_eq(optim_scaler_create(&s, &c, NULL, 0), 0);
  int skip;
  cr_assert_eq(optim_scaler_update(s, 1, &skip), 0);
  cr_assert(skip == 1 && optim_scaler_scale(s) == 512.0f);
  cr_assert_eq(optim_scaler_update(s, 1, &skip), 0);
  cr_assert_eq(optim_scaler_update(s, 1, &skip), 0);
  cr_assert(skip == 1 && optim_scaler_scale(s) == 256.0f); /* floor */
  cr_assert_eq(optim_scaler_skipped(s), 3);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(optim_scaler_update(s, 0, &skip), 0);
    cr_assert(skip == 0 && optim_scaler_scale(s) == 256.0f);
  }
  cr_assert_eq(optim_scaler_update(s, 0, &skip), 0);
  cr_assert(optim_scaler_scale(s) == 512.0f && optim_scaler_good_steps(s) == 0);
  for (int i = 0; i < 9; i++)
    cr_assert_eq(optim_scaler_update(s, 0, &skip), 0);
  cr_assert(optim_scaler_scale(s) == 4096.0f); /* ceiling */
  optim_scaler_destroy(s);
}

/* A full fp16-style loop: gradients arrive multiplied by the scale; at step
 * 3 one shard holds an inf and at step 5 a nan. Those steps must be skipped
 * (parameters, moments and the bias-correction step untouched) and the
 * result must equal the reference AdamW run on the good steps only, with
 * gradients unscaled. */
Test(scaler, adamw_skips_nonfinite_steps) {
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  optim *o = NULL;
  cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
  optim_group g = optim_group_defaults(OPTIM_ADAMW);
  g.lr = 0.01f;
  int id;
  cr_assert_eq(optim_add_group(o, &g, &id), 0);
  optim_scaler *sc = NULL;
  optim_scaler_config sconf = OPTIM_SCALER_DEFAULTS;
  sconf.window = 2;
  cr_assert_eq(optim_scaler_create(&sc, &sconf, NULL, 0), 0);
  enum { N = 300, STEPS = 8 };
  float p[N], m[N] = {0}, v[N] = {0}, gu[N], gsc[N];
  rng_t rng = {99};
  rng_fill(&rng, p, N, 1.0);
  ref_tensor r = ref_new(p, N);
  optim_tensor t[2] = {
      {.param = p, .grad = gsc, .m = m, .v = v, .group = id, .n = 200},
      {.param = p + 200, .grad = gsc + 200, .m = m + 200, .v = v + 200, .group = id, .n = 100}};
  long good = 0;
  for (int s = 1; s <= STEPS; s++) {
    rng_fill(&rng, gu, N, 0.1);
    float scale = optim_scaler_scale(sc);
    for (int i = 0; i < N; i++)
      gsc[i] = gu[i] * scale;
    if (s == 3) gsc[250] = INFINITY;
    if (s == 5) gsc[17] = NAN;
    double ss[2];
    cr_assert_eq(optim_grad_sumsq(o, ss, t, 2), 0);
    float gs;
    cr_assert_eq(optim_grad_scale(ss[0] + ss[1], scale, 0.0f, &gs, NULL), 0);
    int skip;
    cr_assert_eq(optim_scaler_update(sc, !isfinite(ss[0] + ss[1]), &skip), 0);
    cr_assert_eq(skip, s == 3 || s == 5, "step %d skip %d", s, skip);
    if (skip) {
      cr_assert(optim_scaler_scale(sc) == scale * 0.5f);
      continue;
    }
    good++;
    ref_adamw(&r, gu, 1.0, &g, g.lr, good);
    cr_assert_eq(optim_step(o, t, 2, gs), 0, "%s", optim_last_error(o));
    cr_assert_eq(optim_get_step(o), good);
    /* unscaling by a power of two is exact: the reference tolerance of
     * test_update.c applies */
    expect_close(p, r.p, N, 4e-6, 4e-6, "adamw under the loss scaler");
  }
  cr_assert_eq(optim_scaler_skipped(sc), 2);
  ref_free(&r);
  optim_scaler_destroy(sc);
  optim_destroy(o);
}

/* ---- bad input: a status and a message naming the value ---- */

static void expect_group_error(int kind, optim_group g, const char *needle) {
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = kind;
  optim *o = NULL;
  cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
  int id = -1;
  cr_assert_eq(optim_add_group(o, &g, &id), STRATA_EINVAL);
  cr_assert_eq(id, -1);
  cr_assert(strstr(optim_last_error(o), needle), "message '%s' lacks '%s'", optim_last_error(o),
            needle);
  optim_destroy(o);
}

Test(errors, bad_hyper_parameters) {
  optim_group g = optim_group_defaults(OPTIM_ADAMW);
  g.lr = -0.1f;
  expect_group_error(OPTIM_ADAMW, g, "lr = -0.1");
  g = optim_group_defaults(OPTIM_ADAMW);
  g.beta1 = 1.0f;
  expect_group_error(OPTIM_ADAMW, g, "beta1 = 1");
  g = optim_group_defaults(OPTIM_LAMB);
  g.beta2 = -0.5f;
  expect_group_error(OPTIM_LAMB, g, "beta2 = -0.5");
  g = optim_group_defaults(OPTIM_ADAMW);
  g.eps = 0.0f;
  expect_group_error(OPTIM_ADAMW, g, "eps = 0");
  g = optim_group_defaults(OPTIM_ADAMW);
  g.eps = -1e-8f;
  expect_group_error(OPTIM_ADAMW, g, "eps = -1e-08");
  g = optim_group_defaults(OPTIM_SGD);
  g.momentum = 1.5f;
  expect_group_error(OPTIM_SGD, g, "momentum = 1.5");
  g = optim_group_defaults(OPTIM_LARS);
  g.trust_coef = 0.0f;
  expect_group_error(OPTIM_LARS, g, "trust_coef = 0");
  g = optim_group_defaults(OPTIM_LAMB);
  g.phi_min = 3.0f;
  g.phi_max = 2.0f;
  expect_group_error(OPTIM_LAMB, g, "phi_min 3");
  g = optim_group_defaults(OPTIM_ADAMW);
  g.weight_decay = NAN;
  expect_group_error(OPTIM_ADAMW, g, "weight_decay = nan");
}

Test(errors, mismatched_lengths_and_state) {
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = OPTIM_LAMB;
  optim *o = NULL;
  cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
  int id;
  cr_assert_eq(optim_add_group(o, NULL, &id), 0);
  float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, m[4] = {0}, v[4] = {0};
  optim_tensor t = {.param = p, .grad = g, .m = m, .v = v, .group = id, .n = 4};
  double sums[4];
  cr_assert_eq(optim_partials(o, sums, 3, &t, 1, 1.0f), STRATA_EINVAL);
  cr_assert(strstr(optim_last_error(o), "length 3"), "%s", optim_last_error(o));
  /* apply before phase one */
  cr_assert_eq(optim_apply(o, &t, 1, sums, 2, 1.0f), STRATA_ESTATE);
  cr_assert_eq(optim_partials(o, sums, 2, &t, 1, 1.0f), 0);
  cr_assert_eq(optim_partials(o, sums, 2, &t, 1, 1.0f), STRATA_ESTATE);
  cr_assert_eq(optim_apply(o, &t, 1, sums, 4, 1.0f), STRATA_EINVAL);
  cr_assert_eq(optim_apply(o, &t, 1, sums, 2, 1.0f), 0);
  /* missing state, bad group, bad grad scale */
  t.v = NULL;
  cr_assert_eq(optim_step(o, &t, 1, 1.0f), STRATA_EINVAL);
  cr_assert(strstr(optim_last_error(o), "lacks"), "%s", optim_last_error(o));
  t.v = v;
  t.group = 5;
  cr_assert_eq(optim_step(o, &t, 1, 1.0f), STRATA_EINVAL);
  cr_assert(strstr(optim_last_error(o), "group 5"), "%s", optim_last_error(o));
  t.group = id;
  cr_assert_eq(optim_step(o, &t, 1, NAN), STRATA_EINVAL);
  cr_assert_eq(optim_get_step(o), 1);
  optim_schedule s = {OPTIM_SCHED_POLY, 10, 5, 1.0, 0.0};
  cr_assert_eq(optim_set_schedule(o, &s), STRATA_EINVAL);
  cr_assert(strstr(optim_last_error(o), "total = 5"), "%s", optim_last_error(o));
  optim_destroy(o);
  optim_destroy(NULL);
}

Test(errors, bad_config) {
  optim *o = NULL;
  char err[256];
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = 9;
  cr_assert_eq(optim_create(&o, &cfg, err, sizeof err), STRATA_EINVAL);
  cr_assert_null(o);
  cr_assert(strstr(err, "kind 9"), "%s", err);
  optim_scaler *s = NULL;
  optim_scaler_config sc = OPTIM_SCALER_DEFAULTS;
  sc.backoff = 1.5f;
  cr_assert_eq(optim_scaler_create(&s, &sc, err, sizeof err), STRATA_EINVAL);
  cr_assert(strstr(err, "1.5"), "%s", err);
}

/* A CUDA request here (no GPU in CI, or a CPU-only build) is UNSUPPORTED,
 * never a crash or a link error. */
Test(errors, cuda_unavailable) {
  optim *o = NULL;
  char err[256];
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.device = OPTIM_CUDA;
  int rc = optim_create(&o, &cfg, err, sizeof err);
  if (rc == 0) {
    optim_destroy(o);
    cr_skip_test("a CUDA device is present; covered by the GPU tests");
  }
  cr_assert_eq(rc, STRATA_EUNSUPPORTED, "%d: %s", rc, err);
  cr_assert(strstr(err, "CUDA"), "%s", err);
}

/* Resuming: 4 LAMB steps in one handle equal 2 steps, then a new handle
 * given the step count (optim_set_step) and the saved state, then 2 more.
 * Bit-exact: the same operations on the same values. */
Test(resume, set_step_continues_bias_correction) {
  enum { N = 5000 };
  static float p1[N], m1[N], v1[N], p2[N], m2[N], v2[N], g[4][N];
  rng_t rng = {2024};
  rng_fill(&rng, p1, N, 1.0);
  memcpy(p2, p1, sizeof p1);
  for (int s = 0; s < 4; s++)
    rng_fill(&rng, g[s], N, 0.1);
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = OPTIM_LAMB;
  optim *a = NULL, *b = NULL;
  int id;
  cr_assert_eq(optim_create(&a, &cfg, NULL, 0), 0);
  cr_assert_eq(optim_add_group(a, NULL, &id), 0);
  optim_tensor t1 = {.param = p1, .m = m1, .v = v1, .group = id, .n = N};
  optim_tensor t2 = {.param = p2, .m = m2, .v = v2, .group = id, .n = N};
  for (int s = 0; s < 4; s++) {
    t1.grad = g[s];
    cr_assert_eq(optim_step(a, &t1, 1, 1.0f), 0);
  }
  optim_destroy(a);
  cr_assert_eq(optim_create(&a, &cfg, NULL, 0), 0);
  cr_assert_eq(optim_add_group(a, NULL, &id), 0);
  for (int s = 0; s < 2; s++) {
    t2.grad = g[s];
    cr_assert_eq(optim_step(a, &t2, 1, 1.0f), 0);
  }
  cr_assert_eq(optim_create(&b, &cfg, NULL, 0), 0);
  cr_assert_eq(optim_add_group(b, NULL, &id), 0);
  cr_assert_eq(optim_set_step(b, optim_get_step(a)), 0);
  for (int s = 2; s < 4; s++) {
    t2.grad = g[s];
    cr_assert_eq(optim_step(b, &t2, 1, 1.0f), 0);
  }
  cr_assert(memcmp(p1, p2, sizeof p1) == 0 && memcmp(m1, m2, sizeof m1) == 0 &&
            memcmp(v1, v2, sizeof v1) == 0);
  cr_assert_eq(optim_set_step(b, -1), STRATA_EINVAL);
  optim_destroy(a);
  optim_destroy(b);
}

/* Groups can be read and changed between steps (e.g. a manual lr drop). */
Test(groups, set_and_get) {
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = OPTIM_SGD;
  optim *o = NULL;
  cr_assert_eq(optim_create(&o, &cfg, NULL, 0), 0);
  int id;
  cr_assert_eq(optim_add_group(o, NULL, &id), 0);
  optim_group g;
  cr_assert_eq(optim_get_group(o, id, &g), 0);
  cr_assert_float_eq(g.lr, 0.01f, 0);
  float p = 1.0f, gr = 1.0f;
  optim_tensor t = {.param = &p, .grad = &gr, .group = id, .n = 1};
  cr_assert_eq(optim_step(o, &t, 1, 1.0f), 0);
  cr_assert_float_eq(p, 0.99f, 1e-7);
  g.lr = 0.5f;
  cr_assert_eq(optim_set_group(o, id, &g), 0);
  cr_assert_eq(optim_step(o, &t, 1, 2.0f), 0); /* grad_scale 2 */
  cr_assert_float_eq(p, 0.99f - 1.0f, 1e-7);
  g.lr = -1.0f;
  cr_assert_eq(optim_set_group(o, id, &g), STRATA_EINVAL);
  cr_assert_eq(optim_set_group(o, 7, &g), STRATA_ENOTFOUND);
  cr_assert(optim_isa_in_use(o) != OPTIM_ISA_AUTO);
  optim_destroy(o);
}
