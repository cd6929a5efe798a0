/* The linear layer fused with its activation (tensor_linear_act_*): on the
 * CPU it is the separate ops in sequence, bit for bit, and its backward
 * agrees with central finite differences of a double-precision reference
 * (tolerances as in test_ops.c). */
#include <criterion/criterion.h>
#include <string.h>

#include "refcheck.h"

static tensor_ctx_t *ctx;
static void setup(void) {
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.threads = 2;
  cr_assert_eq(tensor_ctx_create(&ctx, &o), 0);
}
static void teardown(void) { tensor_ctx_destroy(ctx); }
TestSuite(linear_act, .init = setup, .fini = teardown);

static tensor_t mkt(int ndim, const int64_t *shape, uint64_t seed, float scale) {
  tensor_t t;
  cr_assert_eq(tensor_alloc(ctx, &t, TENSOR_F32, TENSOR_CPU, ndim, shape), 0);
  if (seed) rnd(t.data, tensor_numel(&t), seed, scale);
  return t;
}

static void expect_same(const char *what, const tensor_t *a, const tensor_t *b) {
  cr_expect(memcmp(a->data, b->data, tensor_nbytes(a)) == 0, "%s: not bit-identical to the separate ops", what);
}

/* rows 6 (2 x 3), K 5, N 4: shapes that no fused path would take anyway. */
Test(linear_act, forward_is_the_separate_ops) {
  int64_t si[3] = {2, 3, 5}, sw[2] = {4, 5}, sb[1] = {4}, so[3] = {2, 3, 4};
  tensor_t x = mkt(3, si, 1, 2.f), w = mkt(2, sw, 2, 1.f), b = mkt(1, sb, 3, 1.f);
  tensor_t out = mkt(3, so, 0, 0), pre = mkt(3, so, 0, 0), ref = mkt(3, so, 0, 0), refpre = mkt(3, so, 0, 0);
  for (int bias = 0; bias < 2; bias++) {
    cr_assert_eq(tensor_linear_forward(ctx, &refpre, &x, &w, bias ? &b : NULL), 0);
    cr_assert_eq(tensor_gelu_forward(ctx, &ref, &refpre), 0);
    cr_assert_eq(tensor_linear_act_forward(ctx, &out, &pre, &x, &w, bias ? &b : NULL, TENSOR_ACT_GELU), 0, "%s",
                 tensor_last_error(ctx));
    expect_same("gelu(linear) out", &out, &ref);
    expect_same("gelu(linear) pre", &pre, &refpre);
  }
  cr_assert_eq(tensor_linear_act_forward(ctx, &out, NULL, &x, &w, &b, TENSOR_ACT_NONE), 0);
  cr_assert_eq(tensor_linear_forward(ctx, &ref, &x, &w, &b), 0);
  expect_same("linear, no activation", &out, &ref);
  tensor_t all[7] = {x, w, b, out, pre, ref, refpre};
  for (int i = 0; i < 7; i++) tensor_free(ctx, &all[i]);
}

/* out = gelu(p) W^T + b, as a function of p (rows x K), W (N x K), b (N). */
typedef struct {
  int rows, N, K;
} dims_t;
static void ref_gelu_linear(double *const *in, double *out, const void *arg) {
  const dims_t *d = arg;
  for (int r = 0; r < d->rows; r++)
    for (int n = 0; n < d->N; n++) {
      double acc = in[2][n];
      for (int k = 0; k < d->K; k++) {
        double x = in[0][r * d->K + k];
        double g = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        acc += g * in[1][n * d->K + k];
      }
      out[r * d->N + n] = acc;
    }
}

Test(linear_act, backward_through_the_activation) {
  dims_t d = {6, 4, 5};
  int64_t sp[2] = {6, 5}, sw[2] = {4, 5}, sb[1] = {4}, so[2] = {6, 4};
  tensor_t p = mkt(2, sp, 11, 2.f), w = mkt(2, sw, 12, 1.f), b = mkt(1, sb, 13, 1.f), R = mkt(2, so, 14, 1.f);
  tensor_t act = mkt(2, sp, 0, 0), dact = mkt(2, sp, 0, 0);
  tensor_t dp = mkt(2, sp, 0, 0), dw = mkt(2, sw, 0, 0), db = mkt(1, sb, 0, 0);
  tensor_t dp2 = mkt(2, sp, 0, 0), dw2 = mkt(2, sw, 0, 0), db2 = mkt(1, sb, 0, 0), tmp = mkt(2, sp, 0, 0);
  cr_assert_eq(tensor_gelu_forward(ctx, &act, &p), 0);
  /* Gradients start at 0.25: the backward accumulates. */
  tensor_t gs[6] = {dp, dw, db, dp2, dw2, db2};
  for (int i = 0; i < 6; i++) tensor_fill(ctx, &gs[i], 0.25f);
  tensor_fill(ctx, &dact, 7.f); /* workspace: whatever it held does not matter */
  cr_assert_eq(tensor_linear_act_backward(ctx, &dp, &dact, &dw, &db, &R, &act, &w, &p, TENSOR_ACT_GELU), 0, "%s",
               tensor_last_error(ctx));
  /* The separate ops, in the order a model would call them. */
  cr_assert_eq(tensor_linear_backward(ctx, &tmp, &dw2, &db2, &R, &act, &w), 0);
  cr_assert_eq(tensor_gelu_backward(ctx, &dp2, &tmp, &p), 0);
  expect_same("din_pre", &dp, &dp2);
  expect_same("dweight", &dw, &dw2);
  expect_same("dbias", &db, &db2);
  /* Against finite differences of the double reference. */
  double *ins[3] = {dalloc(30), dalloc(20), dalloc(4)}, *g[3] = {dalloc(30), dalloc(20), dalloc(4)};
  double *Rd = dalloc(24);
  to_d(ins[0], p.data, 30), to_d(ins[1], w.data, 20), to_d(ins[2], b.data, 4), to_d(Rd, R.data, 24);
  int64_t sizes[3] = {30, 20, 4};
  int want[3] = {1, 1, 1};
  fd_grad(ref_gelu_linear, &d, 3, ins, sizes, want, 24, Rd, g);
  for (int k = 0; k < 3; k++)
    for (int64_t i = 0; i < sizes[k]; i++) g[k][i] += 0.25;
  cr_expect_leq(maxerr(dp.data, g[0], 30, 2e-5, 1e-4), 1.0, "din_pre vs finite differences");
  cr_expect_leq(maxerr(dw.data, g[1], 20, 2e-5, 1e-4), 1.0, "dweight vs finite differences");
  cr_expect_leq(maxerr(db.data, g[2], 4, 2e-5, 1e-4), 1.0, "dbias vs finite differences");
  /* Without an activation it is tensor_linear_backward. */
  cr_assert_eq(tensor_linear_act_backward(ctx, &dp, NULL, &dw, NULL, &R, &act, &w, NULL, TENSOR_ACT_NONE), 0);
  cr_assert_eq(tensor_linear_backward(ctx, &dp2, &dw2, NULL, &R, &act, &w), 0);
  expect_same("no activation: din", &dp, &dp2);
  expect_same("no activation: dweight", &dw, &dw2);
  for (int k = 0; k < 3; k++) free(ins[k]), free(g[k]);
  free(Rd);
  tensor_t all[13] = {p, w, b, R, act, dact, dp, dw, db, dp2, dw2, db2, tmp};
  for (int i = 0; i < 13; i++) tensor_free(ctx, &all[i]);
}

Test(linear_act, errors) {
  int64_t si[2] = {3, 8}, sw[2] = {16, 8}, so[2] = {3, 16};
  tensor_t x = mkt(2, si, 1, 1.f), w = mkt(2, sw, 2, 1.f), out = mkt(2, so, 0, 0), pre = mkt(2, so, 0, 0);
  tensor_t small = mkt(2, si, 0, 0);
  cr_expect_eq(tensor_linear_act_forward(ctx, &out, &pre, &x, &w, NULL, (tensor_act_t)5), STRATA_EINVAL);
  cr_expect(strstr(tensor_last_error(ctx), "activation 5"), "%s", tensor_last_error(ctx));
  cr_expect_eq(tensor_linear_act_forward(ctx, &out, NULL, &x, &w, NULL, TENSOR_ACT_GELU), STRATA_EINVAL,
               "GELU needs pre");
  cr_expect_eq(tensor_linear_act_forward(ctx, &out, &out, &x, &w, NULL, TENSOR_ACT_GELU), STRATA_EINVAL,
               "pre may not alias out");
  cr_expect_eq(tensor_linear_act_forward(ctx, &out, &small, &x, &w, NULL, TENSOR_ACT_GELU), STRATA_ESHAPE);
  cr_expect(strstr(tensor_last_error(ctx), "pre"), "%s", tensor_last_error(ctx));
  cr_expect_eq(tensor_linear_act_backward(ctx, &small, NULL, NULL, NULL, &out, &x, &w, &x, TENSOR_ACT_GELU),
               STRATA_EINVAL, "dact is needed for din_pre");
  cr_expect_eq(tensor_linear_act_backward(ctx, &small, &pre, NULL, NULL, &out, &x, &w, &x, TENSOR_ACT_GELU),
               STRATA_ESHAPE, "dact has in's shape");
  tensor_t all[5] = {x, w, out, pre, small};
  for (int i = 0; i < 5; i++) tensor_free(ctx, &all[i]);
}
