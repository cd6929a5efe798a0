/* The fused classifier (tensor_classifier_xent) and the fused residual add +
 * layernorm (tensor_residual_layernorm_*): on the CPU each is the separate
 * ops composed (chunk by chunk for the classifier), bit for bit, and their
 * gradients agree with central finite differences of double-precision
 * references (tolerances as in test_ops.c). */
#include <criterion/criterion.h>
#include <string.h>

#include "refcheck.h"

static tensor_ctx_t *ctx;
static void setup(void) {
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.threads = 2;
  cr_assert_eq(tensor_ctx_create(&ctx, &o), 0);
}
static void teardown(void) {
  tensor_ctx_destroy(ctx);
}
TestSuite(fused, .init = setup, .fini = teardown);

static tensor_t mkt(tensor_dtype_t dt, int ndim, const int64_t *shape, uint64_t seed, float scale) {
  tensor_t t;
  cr_assert_eq(tensor_alloc(ctx, &t, dt, TENSOR_CPU, ndim, shape), 0);
  if (dt == TENSOR_F32) {
    if (seed)
      rnd(t.data, tensor_numel(&t), seed, scale);
    else
      memset(t.data, 0, tensor_nbytes(&t));
  }
  return t;
}

static void expect_same(const char *what, const tensor_t *a, const tensor_t *b) {
  cr_expect(memcmp(a->data, b->data, tensor_nbytes(a)) == 0,
            "%s: not bit-identical to the separate ops", what);
}

/* rows 10 (2 x 5), C 6, V 13; targets with an ignored row (-1). */
enum { CR = 10, CC = 6, CV = 13 };
static const int32_t targets_v[CR] = {3, 0, 12, -1, 7, 7, 1, 11, 5, 2};

/* The separate ops on chunks of `chunk` rows, as the op documents its CPU path. */
static void composed(tensor_t *losses, tensor_t *lse, tensor_t *dh, tensor_t *dw, const tensor_t *h,
                     const tensor_t *w, const tensor_t *tg, float dloss, int chunk) {
  int64_t zs[2] = {chunk, CV};
  tensor_t z = mkt(TENSOR_F32, 2, zs, 0, 0), dz = mkt(TENSOR_F32, 2, zs, 0, 0);
  for (int r0 = 0; r0 < CR; r0 += chunk) {
    int n = CR - r0 < chunk ? CR - r0 : chunk;
    tensor_t hc = tensor_view2((float *)h->data + r0 * CC, TENSOR_F32, TENSOR_CPU, n, CC);
    tensor_t zc = tensor_view2(z.data, TENSOR_F32, TENSOR_CPU, n, CV),
             dzc = tensor_view2(dz.data, TENSOR_F32, TENSOR_CPU, n, CV);
    tensor_t tc = tensor_view1((int32_t *)tg->data + r0, TENSOR_I32, TENSOR_CPU, n);
    tensor_t lc = tensor_view1((float *)lse->data + r0, TENSOR_F32, TENSOR_CPU, n);
    tensor_t oc = tensor_view1((float *)losses->data + r0, TENSOR_F32, TENSOR_CPU, n);
    tensor_t dhc = tensor_view2((float *)dh->data + r0 * CC, TENSOR_F32, TENSOR_CPU, n, CC);
    cr_assert_eq(tensor_linear_forward(ctx, &zc, &hc, w, NULL), 0);
    cr_assert_eq(tensor_xent_forward(ctx, &oc, &lc, &zc, &tc), 0);
    cr_assert_eq(tensor_zero(ctx, &dzc), 0);
    cr_assert_eq(tensor_xent_backward(ctx, &dzc, &zc, &lc, &tc, dloss), 0);
    cr_assert_eq(tensor_linear_backward(ctx, &dhc, dw, NULL, &dzc, &hc, w), 0);
  }
  tensor_free(ctx, &z), tensor_free(ctx, &dz);
}

static void check_chunk(int chunk) {
  int64_t hs[3] = {2, 5, CC}, ws[2] = {CV, CC}, rs[2] = {2, 5};
  tensor_t h = mkt(TENSOR_F32, 3, hs, 11, 1.f), w = mkt(TENSOR_F32, 2, ws, 12, 1.f);
  tensor_t tg = mkt(TENSOR_I32, 2, rs, 0, 0);
  memcpy(tg.data, targets_v, sizeof targets_v);
  tensor_t l1 = mkt(TENSOR_F32, 2, rs, 0, 0), s1 = mkt(TENSOR_F32, 2, rs, 0, 0),
           l2 = mkt(TENSOR_F32, 2, rs, 0, 0), s2 = mkt(TENSOR_F32, 2, rs, 0, 0);
  /* the gradients accumulate: start both from the same non-zero values */
  tensor_t dh1 = mkt(TENSOR_F32, 3, hs, 13, 0.1f), dh2 = mkt(TENSOR_F32, 3, hs, 13, 0.1f);
  tensor_t dw1 = mkt(TENSOR_F32, 2, ws, 14, 0.1f), dw2 = mkt(TENSOR_F32, 2, ws, 14, 0.1f);
  float dloss = 1.f / 9;
  cr_assert_eq(tensor_classifier_xent(ctx, &l1, &s1, &dh1, &dw1, &h, &w, &tg, dloss, chunk), 0,
               "%s", tensor_last_error(ctx));
  composed(&l2, &s2, &dh2, &dw2, &h, &w, &tg, dloss, chunk <= 0 || chunk > CR ? CR : chunk);
  expect_same("losses", &l1, &l2), expect_same("lse", &s1, &s2);
  expect_same("dh", &dh1, &dh2), expect_same("dweight", &dw1, &dw2);
  cr_expect_eq(((float *)l1.data)[3], 0.f, "an ignored row's loss is 0");
  /* forward only: the same losses and lse, the gradients untouched */
  tensor_t l3 = mkt(TENSOR_F32, 2, rs, 0, 0), s3 = mkt(TENSOR_F32, 2, rs, 0, 0);
  cr_assert_eq(tensor_classifier_xent(ctx, &l3, &s3, NULL, NULL, &h, &w, &tg, 0.f, chunk), 0);
  expect_same("forward-only losses", &l3, &l1), expect_same("forward-only lse", &s3, &s1);
  tensor_t *all[] = {&h, &w, &tg, &l1, &s1, &l2, &s2, &dh1, &dh2, &dw1, &dw2, &l3, &s3};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    tensor_free(ctx, all[i]);
}

Test(fused, classifier_is_the_separate_ops_chunk_by_chunk) {
  check_chunk(3); /* 3 + 3 + 3 + 1 rows */
  check_chunk(5);
  check_chunk(0);  /* the default: one chunk here */
  check_chunk(64); /* more than the rows: one chunk */
}

/* One chunk is the unchunked separate ops over the whole (2, 5, C) h, as the
 * GPT model's head runs them: bit for bit. */
Test(fused, classifier_one_chunk_is_the_whole_head) {
  int64_t hs[3] = {2, 5, CC}, ws[2] = {CV, CC}, rs[2] = {2, 5}, zs[3] = {2, 5, CV};
  tensor_t h = mkt(TENSOR_F32, 3, hs, 21, 1.f), w = mkt(TENSOR_F32, 2, ws, 22, 1.f),
           tg = mkt(TENSOR_I32, 2, rs, 0, 0);
  memcpy(tg.data, targets_v, sizeof targets_v);
  tensor_t l1 = mkt(TENSOR_F32, 2, rs, 0, 0), s1 = mkt(TENSOR_F32, 2, rs, 0, 0),
           l2 = mkt(TENSOR_F32, 2, rs, 0, 0), s2 = mkt(TENSOR_F32, 2, rs, 0, 0),
           z = mkt(TENSOR_F32, 3, zs, 0, 0), dz = mkt(TENSOR_F32, 3, zs, 0, 0);
  tensor_t dh1 = mkt(TENSOR_F32, 3, hs, 0, 0), dh2 = mkt(TENSOR_F32, 3, hs, 0, 0);
  tensor_t dw1 = mkt(TENSOR_F32, 2, ws, 23, 0.1f), dw2 = mkt(TENSOR_F32, 2, ws, 23, 0.1f);
  cr_assert_eq(tensor_classifier_xent(ctx, &l1, &s1, &dh1, &dw1, &h, &w, &tg, 0.25f, 0), 0);
  cr_assert_eq(tensor_linear_forward(ctx, &z, &h, &w, NULL), 0);
  cr_assert_eq(tensor_xent_forward(ctx, &l2, &s2, &z, &tg), 0);
  cr_assert_eq(tensor_xent_backward(ctx, &dz, &z, &s2, &tg, 0.25f), 0);
  cr_assert_eq(tensor_linear_backward(ctx, &dh2, &dw2, NULL, &dz, &h, &w), 0);
  expect_same("losses", &l1, &l2), expect_same("lse", &s1, &s2);
  expect_same("dh", &dh1, &dh2), expect_same("dweight", &dw1, &dw2);
  tensor_t *all[] = {&h, &w, &tg, &l1, &s1, &l2, &s2, &z, &dz, &dh1, &dh2, &dw1, &dw2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    tensor_free(ctx, all[i]);
}

/* L = sum over counted rows of R_r loss_r, in double: the gradient the op
 * returns with dloss = 1 weights every row by 1, so R = 1 (out = the losses). */
static void ref_classifier(double *const *in, double *out, const void *arg) {
  const int32_t *t = arg;
  const double *h = in[0], *w = in[1];
  for (int r = 0; r < CR; r++) {
    double z[CV], mx = -INFINITY, s = 0;
    for (int v = 0; v < CV; v++) {
      z[v] = 0;
      for (int c = 0; c < CC; c++)
        z[v] += h[r * CC + c] * w[v * CC + c];
      mx = z[v] > mx ? z[v] : mx;
    }
    for (int v = 0; v < CV; v++)
      s += exp(z[v] - mx);
    out[r] = t[r] < 0 ? 0 : mx + log(s) - z[t[r]];
  }
}

Test(fused, classifier_gradients_match_finite_differences) {
  int64_t hs[2] = {CR, CC}, ws[2] = {CV, CC}, rs[1] = {CR};
  tensor_t h = mkt(TENSOR_F32, 2, hs, 31, 1.f), w = mkt(TENSOR_F32, 2, ws, 32, 1.f),
           tg = mkt(TENSOR_I32, 1, rs, 0, 0);
  memcpy(tg.data, targets_v, sizeof targets_v);
  tensor_t l = mkt(TENSOR_F32, 1, rs, 0, 0), s = mkt(TENSOR_F32, 1, rs, 0, 0),
           dh = mkt(TENSOR_F32, 2, hs, 0, 0), dw = mkt(TENSOR_F32, 2, ws, 0, 0);
  cr_assert_eq(tensor_classifier_xent(ctx, &l, &s, &dh, &dw, &h, &w, &tg, 1.f, 4), 0);
  double *in[2] = {dalloc(CR * CC), dalloc(CV * CC)}, *g[2] = {dalloc(CR * CC), dalloc(CV * CC)},
         out[CR], R[CR];
  to_d(in[0], h.data, CR * CC), to_d(in[1], w.data, CV * CC);
  for (int i = 0; i < CR; i++)
    R[i] = 1;
  ref_classifier(in, out, targets_v);
  cr_expect(maxerr(l.data, out, CR, 1e-5, 1e-5) <= 1, "losses vs double reference");
  int64_t sizes[2] = {CR * CC, CV * CC};
  int want[2] = {1, 1};
  fd_grad(ref_classifier, targets_v, 2, in, sizes, want, CR, R, g);
  cr_expect(maxerr(dh.data, g[0], CR * CC, 1e-5, 1e-4) <= 1, "dh vs finite differences");
  cr_expect(maxerr(dw.data, g[1], CV * CC, 1e-5, 1e-4) <= 1, "dweight vs finite differences");
  for (int k = 0; k < 2; k++)
    free(in[k]), free(g[k]);
  tensor_t *all[] = {&h, &w, &tg, &l, &s, &dh, &dw};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    tensor_free(ctx, all[i]);
}

/* The point of the op: the accountant's peak grows by the chunk's buffers
 * (logits and their gradient, chunk x V each), not by rows x V. */
Test(fused, classifier_peak_holds_one_chunk) {
  int64_t R = 256, V = 300, C = 8, hs[2] = {R, C}, ws[2] = {V, C}, rs[1] = {R};
  tensor_t h = mkt(TENSOR_F32, 2, hs, 41, 1.f), w = mkt(TENSOR_F32, 2, ws, 42, 1.f),
           tg = mkt(TENSOR_I32, 1, rs, 0, 0);
  for (int64_t i = 0; i < R; i++)
    ((int32_t *)tg.data)[i] = (int32_t)(i * 7 % V);
  tensor_t l = mkt(TENSOR_F32, 1, rs, 0, 0), s = mkt(TENSOR_F32, 1, rs, 0, 0),
           dh = mkt(TENSOR_F32, 2, hs, 0, 0), dw = mkt(TENSOR_F32, 2, ws, 0, 0);
  size_t cur = 0, peak = 0;
  tensor_memory_reset_peak(ctx, TENSOR_CPU);
  tensor_memory(ctx, TENSOR_CPU, &cur, NULL);
  cr_assert_eq(tensor_classifier_xent(ctx, &l, &s, &dh, &dw, &h, &w, &tg, 1.f / R, 16), 0);
  tensor_memory(ctx, TENSOR_CPU, NULL, &peak);
  cr_expect_eq(peak - cur, (size_t)(2 * 16 * V * 4),
               "peak grew by %zu bytes, two 16-row chunks are %lld", peak - cur,
               (long long)(2 * 16 * V * 4));
  tensor_t *all[] = {&h, &w, &tg, &l, &s, &dh, &dw};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    tensor_free(ctx, all[i]);
}

Test(fused, classifier_errors_name_the_values) {
  int64_t hs[2] = {4, 3}, ws[2] = {5, 3}, bad[2] = {5, 4}, rs[1] = {4};
  tensor_t h = mkt(TENSOR_F32, 2, hs, 1, 1.f), w = mkt(TENSOR_F32, 2, ws, 2, 1.f),
           wb = mkt(TENSOR_F32, 2, bad, 3, 1.f);
  tensor_t tg = mkt(TENSOR_I32, 1, rs, 0, 0), s = mkt(TENSOR_F32, 1, rs, 0, 0);
  memset(tg.data, 0, 16);
  cr_expect_eq(tensor_classifier_xent(ctx, NULL, &s, NULL, NULL, &h, &wb, &tg, 1.f, 0),
               STRATA_ESHAPE);
  cr_expect(strstr(tensor_last_error(ctx), "weight") != NULL, "%s", tensor_last_error(ctx));
  ((int32_t *)tg.data)[2] = 5;
  cr_expect_eq(tensor_classifier_xent(ctx, NULL, &s, NULL, NULL, &h, &w, &tg, 1.f, 0),
               STRATA_EINVAL);
  cr_expect(strstr(tensor_last_error(ctx), "targets[2] = 5") != NULL, "%s", tensor_last_error(ctx));
  tensor_t *all[] = {&h, &w, &wb, &tg, &s};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    tensor_free(ctx, all[i]);
}

/* ---- residual add + layernorm ---- */

Test(fused, residual_layernorm_is_add_then_layernorm) {
  int64_t xs[3] = {2, 3, 7}, cs[1] = {7}, rs[2] = {2, 3};
  tensor_t a = mkt(TENSOR_F32, 3, xs, 51, 1.f), b = mkt(TENSOR_F32, 3, xs, 52, 1.f);
  tensor_t w = mkt(TENSOR_F32, 1, cs, 53, 1.f), bi = mkt(TENSOR_F32, 1, cs, 54, 1.f);
  tensor_t r1 = mkt(TENSOR_F32, 3, xs, 0, 0), o1 = mkt(TENSOR_F32, 3, xs, 0, 0),
           m1 = mkt(TENSOR_F32, 2, rs, 0, 0), q1 = mkt(TENSOR_F32, 2, rs, 0, 0);
  tensor_t r2 = mkt(TENSOR_F32, 3, xs, 0, 0), o2 = mkt(TENSOR_F32, 3, xs, 0, 0),
           m2 = mkt(TENSOR_F32, 2, rs, 0, 0), q2 = mkt(TENSOR_F32, 2, rs, 0, 0);
  cr_assert_eq(tensor_residual_layernorm_forward(ctx, &r1, &o1, &m1, &q1, &a, &b, &w, &bi, 1e-5f),
               0, "%s", tensor_last_error(ctx));
  cr_assert_eq(tensor_add_forward(ctx, &r2, &a, &b), 0);
  cr_assert_eq(tensor_layernorm_forward(ctx, &o2, &m2, &q2, &r2, &w, &bi, 1e-5f), 0);
  expect_same("resid", &r1, &r2), expect_same("out", &o1, &o2), expect_same("mean", &m1, &m2),
      expect_same("rstd", &q1, &q2);
  /* backward: the layernorm's over resid, accumulated into dresid */
  tensor_t g = mkt(TENSOR_F32, 3, xs, 55, 1.f), d1 = mkt(TENSOR_F32, 3, xs, 56, 0.1f),
           d2 = mkt(TENSOR_F32, 3, xs, 56, 0.1f);
  tensor_t dw1 = mkt(TENSOR_F32, 1, cs, 0, 0), db1 = mkt(TENSOR_F32, 1, cs, 0, 0),
           dw2 = mkt(TENSOR_F32, 1, cs, 0, 0), db2 = mkt(TENSOR_F32, 1, cs, 0, 0);
  cr_assert_eq(tensor_residual_layernorm_backward(ctx, &d1, &dw1, &db1, &g, &r1, &w, &m1, &q1), 0);
  cr_assert_eq(tensor_layernorm_backward(ctx, &d2, &dw2, &db2, &g, &r2, &w, &m2, &q2), 0);
  expect_same("dresid", &d1, &d2), expect_same("dweight", &dw1, &dw2),
      expect_same("dbias", &db1, &db2);
  /* resid may alias a */
  cr_assert_eq(tensor_residual_layernorm_forward(ctx, &a, &o1, &m1, &q1, &a, &b, &w, &bi, 1e-5f),
               0);
  expect_same("resid over a", &a, &r2), expect_same("out with resid over a", &o1, &o2);
  int64_t bad[3] = {2, 3, 6};
  tensor_t c = mkt(TENSOR_F32, 3, bad, 57, 1.f);
  cr_expect_eq(tensor_residual_layernorm_forward(ctx, &r1, &o1, &m1, &q1, &c, &b, &w, &bi, 1e-5f),
               STRATA_ESHAPE);
  tensor_t *all[] = {&a,  &b,  &w, &bi, &r1, &o1,  &m1,  &q1,  &r2,  &o2,
                     &m2, &q2, &g, &d1, &d2, &dw1, &db1, &dw2, &db2, &c};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    tensor_free(ctx, all[i]);
}

/* out = LN(a + b) in double; the gradient of a and of b is the same. */
enum { LR = 4, LC = 5 };
static void ref_res_ln(double *const *in, double *out, const void *arg) {
  (void)arg;
  const double *a = in[0], *b = in[1], *w = in[2], *bi = in[3];
  for (int r = 0; r < LR; r++) {
    double x[LC], m = 0, v = 0;
    for (int c = 0; c < LC; c++)
      x[c] = a[r * LC + c] + b[r * LC + c], m += x[c] / LC;
    for (int c = 0; c < LC; c++)
      v += (x[c] - m) * (x[c] - m) / LC;
    double q = 1 / sqrt(v + 1e-5);
    for (int c = 0; c < LC; c++)
      out[r * LC + c] = (x[c] - m) * q * w[c] + bi[c];
  }
}

Test(fused, residual_layernorm_gradients_match_finite_differences) {
  int64_t xs[2] = {LR, LC}, cs[1] = {LC}, rs[1] = {LR};
  tensor_t a = mkt(TENSOR_F32, 2, xs, 61, 1.f), b = mkt(TENSOR_F32, 2, xs, 62, 1.f);
  tensor_t w = mkt(TENSOR_F32, 1, cs, 63, 1.f), bi = mkt(TENSOR_F32, 1, cs, 64, 1.f);
  tensor_t r = mkt(TENSOR_F32, 2, xs, 0, 0), o = mkt(TENSOR_F32, 2, xs, 0, 0),
           m = mkt(TENSOR_F32, 1, rs, 0, 0), q = mkt(TENSOR_F32, 1, rs, 0, 0),
           g = mkt(TENSOR_F32, 2, xs, 65, 1.f), d = mkt(TENSOR_F32, 2, xs, 0, 0),
           dw = mkt(TENSOR_F32, 1, cs, 0, 0), db = mkt(TENSOR_F32, 1, cs, 0, 0);
  cr_assert_eq(tensor_residual_layernorm_forward(ctx, &r, &o, &m, &q, &a, &b, &w, &bi, 1e-5f), 0);
  cr_assert_eq(tensor_residual_layernorm_backward(ctx, &d, &dw, &db, &g, &r, &w, &m, &q), 0);
  double *in[4] = {dalloc(LR * LC), dalloc(LR * LC), dalloc(LC), dalloc(LC)};
  double *gr[4] = {dalloc(LR * LC), dalloc(LR * LC), dalloc(LC), dalloc(LC)}, R[LR * LC],
         out[LR * LC];
  to_d(in[0], a.data, LR * LC), to_d(in[1], b.data, LR * LC), to_d(in[2], w.data, LC),
      to_d(in[3], bi.data, LC);
  to_d(R, g.data, LR * LC);
  ref_res_ln(in, out, NULL);
  cr_expect(maxerr(o.data, out, LR * LC, 1e-5, 1e-5) <= 1, "forward vs double reference");
  int64_t sizes[4] = {LR * LC, LR * LC, LC, LC};
  int want[4] = {1, 1, 1, 1};
  fd_grad(ref_res_ln, NULL, 4, in, sizes, want, LR * LC, R, gr);
  cr_expect(maxerr(d.data, gr[0], LR * LC, 1e-4, 1e-4) <= 1, "dresid vs d/da");
  cr_expect(maxerr(d.data, gr[1], LR * LC, 1e-4, 1e-4) <= 1, "dresid vs d/db");
  cr_expect(maxerr(dw.data, gr[2], LC, 1e-4, 1e-4) <= 1, "dweight");
  cr_expect(maxerr(db.data, gr[3], LC, 1e-4, 1e-4) <= 1, "dbias");
  for (int k = 0; k < 4; k++)
    free(in[k]), free(gr[k]);
  tensor_t *all[] = {&a, &b, &w, &bi, &r, &o, &m, &q, &g, &d, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    tensor_free(ctx, all[i]);
}
