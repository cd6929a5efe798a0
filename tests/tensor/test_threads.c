/* The parallel paths of the CPU kernels (taken above their size thresholds)
 * against the same kernels on one thread, whose logic the finite-difference
 * tests check at small sizes. Work split by rows or column blocks gives the
 * same sums, so most results must be identical; layernorm's per-thread
 * weight-gradient partials and the split GEMMs add in another order: a sum
 * of n = 300 terms of O(1) moves by up to n u ~ 2e-5 (u = 6e-8), typically
 * sqrt(n) u ~ 1e-6; we allow 3e-5 (1 + |x|). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <strata/tensor.h>

static tensor_ctx_t *c1, *c2;
static void setup(void) {
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.threads = 1;
  cr_assert_eq(tensor_ctx_create(&c1, &o), 0);
  o.threads = 2;
  cr_assert_eq(tensor_ctx_create(&c2, &o), 0);
}
static void teardown(void) {
  tensor_ctx_destroy(c1);
  tensor_ctx_destroy(c2);
}
TestSuite(threads, .init = setup, .fini = teardown);

/* A pair of equal tensors, one per context. */
typedef struct {
  tensor_t a, b;
} pair_t;

static pair_t pr(int ndim, const int64_t *shape, uint64_t seed, float scale) {
  pair_t p;
  cr_assert_eq(tensor_alloc(c1, &p.a, TENSOR_F32, TENSOR_CPU, ndim, shape), 0);
  cr_assert_eq(tensor_alloc(c2, &p.b, TENSOR_F32, TENSOR_CPU, ndim, shape), 0);
  cr_assert_eq(tensor_fill_uniform(c1, &p.a, seed, "threads", NULL, -scale, scale), 0);
  cr_assert_eq(tensor_copy(c2, &p.b, &p.a), 0);
  return p;
}
static void same(const char *what, const pair_t *p, double rtol) {
  const float *x = p->a.data, *y = p->b.data;
  int64_t n = tensor_numel(&p->a), bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++)
    if (!(fabs((double)x[i] - y[i]) <= rtol * (1 + fabs(x[i])))) bad = i;
  cr_expect(bad < 0, "%s differs at %lld: %g vs %g", what, (long long)bad, bad < 0 ? 0 : x[bad],
            bad < 0 ? 0 : y[bad]);
}
static void drop(pair_t *p) {
  tensor_free(c1, &p->a);
  tensor_free(c2, &p->b);
}

Test(threads, layernorm_gelu_add_bias) {
  int64_t sx[2] = {300, 256}, sw[1] = {256}, sr[1] = {300};
  pair_t x = pr(2, sx, 1, 2.f), w = pr(1, sw, 2, 1.f), b = pr(1, sw, 3, 1.f), o = pr(2, sx, 4, 1.f);
  pair_t mu = pr(1, sr, 5, 1.f), rs = pr(1, sr, 6, 1.f), g = pr(2, sx, 7, 1.f), dx = pr(2, sx, 8, 1.f);
  pair_t dw = pr(1, sw, 9, 1.f), db = pr(1, sw, 10, 1.f);
  cr_assert_eq(tensor_layernorm_forward(c1, &o.a, &mu.a, &rs.a, &x.a, &w.a, &b.a, 1e-5f), 0);
  cr_assert_eq(tensor_layernorm_forward(c2, &o.b, &mu.b, &rs.b, &x.b, &w.b, &b.b, 1e-5f), 0);
  same("layernorm out", &o, 0), same("layernorm rstd", &rs, 0);
  cr_assert_eq(tensor_layernorm_backward(c1, &dx.a, &dw.a, &db.a, &g.a, &x.a, &w.a, &mu.a, &rs.a), 0);
  cr_assert_eq(tensor_layernorm_backward(c2, &dx.b, &dw.b, &db.b, &g.b, &x.b, &w.b, &mu.b, &rs.b), 0);
  same("layernorm din", &dx, 0), same("layernorm dweight", &dw, 3e-5), same("layernorm dbias", &db, 3e-5);
  cr_assert_eq(tensor_gelu_forward(c1, &o.a, &x.a), 0);
  cr_assert_eq(tensor_gelu_forward(c2, &o.b, &x.b), 0);
  same("gelu out", &o, 0);
  cr_assert_eq(tensor_gelu_backward(c1, &dx.a, &g.a, &x.a), 0);
  cr_assert_eq(tensor_gelu_backward(c2, &dx.b, &g.b, &x.b), 0);
  same("gelu din", &dx, 0);
  cr_assert_eq(tensor_add_forward(c1, &o.a, &o.a, &x.a), 0);
  cr_assert_eq(tensor_add_forward(c2, &o.b, &o.b, &x.b), 0);
  same("add", &o, 0);
  cr_assert_eq(tensor_bias_add_forward(c1, &o.a, &o.a, &b.a), 0);
  cr_assert_eq(tensor_bias_add_forward(c2, &o.b, &o.b, &b.b), 0);
  same("bias add", &o, 0);
  cr_assert_eq(tensor_bias_add_backward(c1, &dx.a, &db.a, &g.a), 0);
  cr_assert_eq(tensor_bias_add_backward(c2, &dx.b, &db.b, &g.b), 0);
  same("bias add din", &dx, 3e-5), same("bias add dbias", &db, 3e-5); /* inputs differ by the above */
  cr_assert_eq(tensor_dropout_forward(c1, &o.a, &o.a, 0.2f, 1, "d", 3), 0);
  cr_assert_eq(tensor_dropout_forward(c2, &o.b, &o.b, 0.2f, 1, "d", 3), 0);
  same("dropout", &o, 0);
  pair_t all[10] = {x, w, b, o, mu, rs, g, dx, dw, db};
  for (int i = 0; i < 10; i++) drop(&all[i]);
}

Test(threads, linear_attention) {
  int B = 4, T = 70, NH = 4, hs = 16, C = NH * hs;
  int64_t sx[3] = {B, T, C}, sq[3] = {B, T, 3 * C}, sw[2] = {3 * C, C}, sb[1] = {3 * C}, sl[3] = {B, NH, T};
  pair_t x = pr(3, sx, 11, 1.f), w = pr(2, sw, 12, 0.3f), b = pr(1, sb, 13, 1.f), q = pr(3, sq, 14, 1.f);
  pair_t y = pr(3, sx, 15, 1.f), l = pr(3, sl, 16, 1.f), g = pr(3, sx, 17, 1.f), dq = pr(3, sq, 18, 1.f);
  pair_t dx = pr(3, sx, 19, 1.f), dw = pr(2, sw, 20, 1.f), db = pr(1, sb, 21, 1.f);
  cr_assert_eq(tensor_linear_forward(c1, &q.a, &x.a, &w.a, &b.a), 0);
  cr_assert_eq(tensor_linear_forward(c2, &q.b, &x.b, &w.b, &b.b), 0);
  same("linear", &q, 3e-5);
  cr_assert_eq(tensor_attention_forward(c1, &y.a, &l.a, &q.a, NH), 0);
  cr_assert_eq(tensor_attention_forward(c2, &y.b, &l.b, &q.b, NH), 0);
  same("attention", &y, 3e-5);
  cr_assert_eq(tensor_attention_backward(c1, &dq.a, &g.a, &q.a, &y.a, &l.a, NH), 0);
  cr_assert_eq(tensor_attention_backward(c2, &dq.b, &g.b, &q.b, &y.b, &l.b, NH), 0);
  same("attention dqkv", &dq, 3e-5);
  cr_assert_eq(tensor_linear_backward(c1, &dx.a, &dw.a, &db.a, &dq.a, &x.a, &w.a), 0);
  cr_assert_eq(tensor_linear_backward(c2, &dx.b, &dw.b, &db.b, &dq.b, &x.b, &w.b), 0);
  same("linear din", &dx, 3e-5), same("linear dweight", &dw, 3e-5), same("linear dbias", &db, 3e-5);
  pair_t all[11] = {x, w, b, q, y, l, g, dq, dx, dw, db};
  for (int i = 0; i < 11; i++) drop(&all[i]);
}

Test(threads, embedding_xent) {
  int B = 4, T = 64, C = 48, V = 1000;
  int32_t ids[256], tg[256];
  for (int i = 0; i < 256; i++) ids[i] = (i * 37) % 50, tg[i] = i % 7 ? (i * 101) % V : -1;
  tensor_t hid = tensor_view2(ids, TENSOR_I32, TENSOR_CPU, B, T), htg = tensor_view1(tg, TENSOR_I32, TENSOR_CPU, 256);
  int64_t se[2] = {V, C}, sp[2] = {T, C}, so[3] = {B, T, C}, sz[2] = {256, V}, sr[1] = {256};
  pair_t e = pr(2, se, 31, 1.f), p = pr(2, sp, 32, 1.f), o = pr(3, so, 33, 1.f);
  cr_assert_eq(tensor_embedding_forward(c1, &o.a, &hid, &e.a, &p.a), 0);
  cr_assert_eq(tensor_embedding_forward(c2, &o.b, &hid, &e.b, &p.b), 0);
  same("embedding", &o, 0);
  cr_assert_eq(tensor_embedding_backward(c1, &e.a, &p.a, &o.a, &hid), 0);
  cr_assert_eq(tensor_embedding_backward(c2, &e.b, &p.b, &o.b, &hid), 0);
  same("embedding dwte", &e, 0), same("embedding dwpe", &p, 0);
  pair_t z = pr(2, sz, 34, 6.f), lo = pr(1, sr, 35, 1.f), ls = pr(1, sr, 36, 1.f), dz = pr(2, sz, 37, 1.f);
  cr_assert_eq(tensor_xent_forward(c1, &lo.a, &ls.a, &z.a, &htg), 0);
  cr_assert_eq(tensor_xent_forward(c2, &lo.b, &ls.b, &z.b, &htg), 0);
  same("xent losses", &lo, 0);
  cr_assert_eq(tensor_xent_backward(c1, &dz.a, &z.a, &ls.a, &htg, 0.01f), 0);
  cr_assert_eq(tensor_xent_backward(c2, &dz.b, &z.b, &ls.b, &htg, 0.01f), 0);
  same("xent dlogits", &dz, 0);
  pair_t all[7] = {e, p, o, z, lo, ls, dz};
  for (int i = 0; i < 7; i++) drop(&all[i]);
}
