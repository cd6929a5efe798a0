/* Every op's forward against a double-precision reference written here from
 * its formula, and every backward against central finite differences of that
 * reference (L = sum(out * R), R random). Gradients start at G0 != 0 so the
 * tests also check that backward accumulates.
 *
 * Tolerances: the library computes in f32 (unit roundoff 6e-8); sums of up to
 * ~50 terms of O(1) values give errors ~1e-6 absolute. The fast vector exp is
 * ~2 ulp. atol 2e-5 + rtol 1e-4 is ~10x above that and ~1000x below the error
 * of any wrong term (a missing or doubled contribution moves a gradient by
 * O(0.1)). */
#include <criterion/criterion.h>
#include <string.h>
#include <strata/half.h>

#include "refcheck.h"

#define G0 0.25f
#define ATOL 2e-5
#define RTOL 1e-4

static tensor_ctx_t *ctx;
static void setup(void) {
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.threads = 2;
  cr_assert_eq(tensor_ctx_create(&ctx, &o), 0);
}
static void teardown(void) { tensor_ctx_destroy(ctx); }
TestSuite(ops, .init = setup, .fini = teardown);

/* A float tensor of random values with its double copy. */
typedef struct {
  tensor_t t;
  double *d;
  int64_t n;
} arg_t;

static arg_t mk(int ndim, const int64_t *shape, uint64_t seed, float scale) {
  arg_t a;
  cr_assert_eq(tensor_alloc(ctx, &a.t, TENSOR_F32, TENSOR_CPU, ndim, shape), 0);
  a.n = tensor_numel(&a.t);
  rnd(a.t.data, a.n, seed, scale);
  a.d = dalloc(a.n);
  to_d(a.d, a.t.data, a.n);
  return a;
}
static arg_t mkgrad(const arg_t *like) {
  arg_t g;
  cr_assert_eq(tensor_alloc(ctx, &g.t, TENSOR_F32, TENSOR_CPU, like->t.ndim, like->t.shape), 0);
  g.n = like->n;
  cr_assert_eq(tensor_fill(ctx, &g.t, G0), 0);
  g.d = dalloc(g.n);
  return g;
}
static void drop(arg_t *a) {
  tensor_free(ctx, &a->t);
  free(a->d);
}
/* Removes G0 so the accumulated gradient can be compared with the FD one. */
static void ungrad(arg_t *g) {
  float *p = g->t.data;
  for (int64_t i = 0; i < g->n; i++) p[i] -= G0;
}
static void expect_close(const char *what, const float *a, const double *b, int64_t n) {
  double e = maxerr(a, b, n, ATOL, RTOL);
  cr_expect(e <= 1.0, "%s: worst error %.3g of tolerance", what, e);
}

/* ---- matmul ---- */
typedef struct {
  int ta, tb, batch, shared_b, M, N, K;
} mm_arg;
static void ref_mm(double *const *in, double *out, const void *p) {
  const mm_arg *a = p;
  for (int b = 0; b < a->batch; b++) {
    const double *A = in[0] + (size_t)b * a->M * a->K;
    const double *B = in[1] + (a->shared_b ? 0 : (size_t)b * a->K * a->N);
    for (int i = 0; i < a->M; i++)
      for (int j = 0; j < a->N; j++) {
        double s = 0;
        for (int k = 0; k < a->K; k++)
          s += (a->ta ? A[k * a->M + i] : A[i * a->K + k]) * (a->tb ? B[j * a->K + k] : B[k * a->N + j]);
        out[((size_t)b * a->M + i) * a->N + j] = s;
      }
  }
}

static void check_matmul(int ta, int tb, int shared_b) {
  mm_arg p = {ta, tb, 3, shared_b, 4, 5, 6};
  int64_t sa[3] = {3, ta ? p.K : p.M, ta ? p.M : p.K}, sb[3] = {3, tb ? p.N : p.K, tb ? p.K : p.N};
  int64_t sc[3] = {3, p.M, p.N};
  arg_t A = mk(3, sa, 1, 1.f), B = shared_b ? mk(2, sb + 1, 2, 1.f) : mk(3, sb, 2, 1.f);
  arg_t Cm = mk(3, sc, 3, 1.f), R = mk(3, sc, 4, 1.f);
  arg_t dA = mkgrad(&A), dB = mkgrad(&B);
  double *ref = dalloc(Cm.n);
  double *ins[2] = {A.d, B.d};
  ref_mm(ins, ref, &p);
  /* C = 0.5 op(A) op(B) + 2 C0 */
  for (int64_t i = 0; i < Cm.n; i++) ref[i] = 0.5 * ref[i] + 2 * Cm.d[i];
  cr_assert_eq(tensor_matmul(ctx, &Cm.t, &A.t, &B.t, ta, tb, 0.5f, 2.f), 0, "%s", tensor_last_error(ctx));
  expect_close("matmul forward", Cm.t.data, ref, Cm.n);
  cr_assert_eq(tensor_matmul_backward(ctx, &dA.t, &dB.t, &R.t, &A.t, &B.t, ta, tb), 0, "%s",
               tensor_last_error(ctx));
  int64_t sizes[2] = {A.n, B.n};
  int want[2] = {1, 1};
  double *g[2] = {dA.d, dB.d};
  fd_grad(ref_mm, &p, 2, ins, sizes, want, Cm.n, R.d, g);
  ungrad(&dA);
  ungrad(&dB);
  expect_close("matmul dA", dA.t.data, dA.d, dA.n);
  expect_close("matmul dB", dB.t.data, dB.d, dB.n);
  free(ref);
  drop(&A), drop(&B), drop(&Cm), drop(&R), drop(&dA), drop(&dB);
}

Test(ops, matmul_nn) { check_matmul(0, 0, 0); }
Test(ops, matmul_nt) { check_matmul(0, 1, 0); }
Test(ops, matmul_tn) { check_matmul(1, 0, 0); }
Test(ops, matmul_tt) { check_matmul(1, 1, 0); }
Test(ops, matmul_shared_nn) { check_matmul(0, 0, 1); }
Test(ops, matmul_shared_nt) { check_matmul(0, 1, 1); }
Test(ops, matmul_shared_tn) { check_matmul(1, 0, 1); }
Test(ops, matmul_shared_tt) { check_matmul(1, 1, 1); }

Test(ops, matmul_large_threads) {
  /* A GEMM big enough to be split over threads, both split directions, against
   * a single-threaded OpenBLAS call on the same data. */
  for (int shape = 0; shape < 2; shape++) {
    int M = shape ? 300 : 40, N = shape ? 40 : 300, K = 130;
    int64_t sa[2] = {M, K}, sb[2] = {N, K}, sc[2] = {M, N};
    arg_t A = mk(2, sa, 11, 1.f), B = mk(2, sb, 12, 1.f), Cm = mk(2, sc, 13, 1.f);
    double *ins[2] = {A.d, B.d}, *ref = dalloc(Cm.n);
    mm_arg p = {0, 1, 1, 1, M, N, K};
    ref_mm(ins, ref, &p);
    cr_assert_eq(tensor_matmul(ctx, &Cm.t, &A.t, &B.t, 0, 1, 1.f, 0.f), 0);
    double e = maxerr(Cm.t.data, ref, Cm.n, 1e-4, 1e-4);
    cr_expect(e <= 1.0, "large matmul error %.3g", e);
    free(ref);
    drop(&A), drop(&B), drop(&Cm);
  }
}

/* ---- linear ---- */
typedef struct {
  int rows, K, N;
} lin_arg;
static void ref_linear(double *const *in, double *out, const void *p) {
  const lin_arg *a = p;
  for (int r = 0; r < a->rows; r++)
    for (int n = 0; n < a->N; n++) {
      double s = in[2][n];
      for (int k = 0; k < a->K; k++) s += in[0][r * a->K + k] * in[1][n * a->K + k];
      out[r * a->N + n] = s;
    }
}

Test(ops, linear) {
  lin_arg p = {6, 5, 4};
  int64_t si[3] = {2, 3, 5}, sw[2] = {4, 5}, sbias[1] = {4}, so[3] = {2, 3, 4};
  arg_t X = mk(3, si, 21, 1.f), W = mk(2, sw, 22, 1.f), Bv = mk(1, sbias, 23, 1.f);
  arg_t O = mk(3, so, 24, 1.f), R = mk(3, so, 25, 1.f);
  arg_t dX = mkgrad(&X), dW = mkgrad(&W), dB = mkgrad(&Bv);
  double *ins[3] = {X.d, W.d, Bv.d}, *ref = dalloc(O.n), *g[3] = {dX.d, dW.d, dB.d};
  ref_linear(ins, ref, &p);
  cr_assert_eq(tensor_linear_forward(ctx, &O.t, &X.t, &W.t, &Bv.t), 0, "%s", tensor_last_error(ctx));
  expect_close("linear forward", O.t.data, ref, O.n);
  cr_assert_eq(tensor_linear_backward(ctx, &dX.t, &dW.t, &dB.t, &R.t, &X.t, &W.t), 0);
  int64_t sizes[3] = {X.n, W.n, Bv.n};
  int want[3] = {1, 1, 1};
  fd_grad(ref_linear, &p, 3, ins, sizes, want, O.n, R.d, g);
  ungrad(&dX), ungrad(&dW), ungrad(&dB);
  expect_close("linear din", dX.t.data, dX.d, dX.n);
  expect_close("linear dweight", dW.t.data, dW.d, dW.n);
  expect_close("linear dbias", dB.t.data, dB.d, dB.n);
  /* No bias: out = in W^T exactly. */
  for (int i = 0; i < 4; i++) Bv.d[i] = 0;
  ref_linear(ins, ref, &p);
  cr_assert_eq(tensor_linear_forward(ctx, &O.t, &X.t, &W.t, NULL), 0);
  expect_close("linear forward without bias", O.t.data, ref, O.n);
  free(ref);
  drop(&X), drop(&W), drop(&Bv), drop(&O), drop(&R), drop(&dX), drop(&dW), drop(&dB);
}

/* ---- bias add, residual add ---- */
static void ref_bias(double *const *in, double *out, const void *p) {
  int N = *(const int *)p;
  for (int i = 0; i < 3 * N; i++) out[i] = in[0][i] + in[1][i % N];
}
static void ref_add(double *const *in, double *out, const void *p) {
  for (int i = 0; i < *(const int *)p; i++) out[i] = in[0][i] + in[1][i];
}

Test(ops, bias_add) {
  int N = 5;
  int64_t sx[2] = {3, 5}, sb[1] = {5};
  arg_t X = mk(2, sx, 31, 1.f), Bv = mk(1, sb, 32, 1.f), O = mk(2, sx, 33, 1.f), R = mk(2, sx, 34, 1.f);
  arg_t dX = mkgrad(&X), dB = mkgrad(&Bv);
  double *ins[2] = {X.d, Bv.d}, *ref = dalloc(O.n), *g[2] = {dX.d, dB.d};
  ref_bias(ins, ref, &N);
  cr_assert_eq(tensor_bias_add_forward(ctx, &O.t, &X.t, &Bv.t), 0);
  expect_close("bias forward", O.t.data, ref, O.n);
  cr_assert_eq(tensor_bias_add_backward(ctx, &dX.t, &dB.t, &R.t), 0);
  int64_t sizes[2] = {X.n, Bv.n};
  int want[2] = {1, 1};
  fd_grad(ref_bias, &N, 2, ins, sizes, want, O.n, R.d, g);
  ungrad(&dX), ungrad(&dB);
  expect_close("bias din", dX.t.data, dX.d, dX.n);
  expect_close("bias dbias", dB.t.data, dB.d, dB.n);
  free(ref);
  drop(&X), drop(&Bv), drop(&O), drop(&R), drop(&dX), drop(&dB);
}

Test(ops, residual_add) {
  int n = 24;
  int64_t s[3] = {2, 3, 4};
  arg_t A = mk(3, s, 41, 1.f), Bt = mk(3, s, 42, 1.f), O = mk(3, s, 43, 1.f), R = mk(3, s, 44, 1.f);
  arg_t dA = mkgrad(&A), dBt = mkgrad(&Bt);
  double *ins[2] = {A.d, Bt.d}, *ref = dalloc(n), *g[2] = {dA.d, dBt.d};
  ref_add(ins, ref, &n);
  cr_assert_eq(tensor_add_forward(ctx, &O.t, &A.t, &Bt.t), 0);
  expect_close("add forward", O.t.data, ref, n);
  cr_assert_eq(tensor_add_backward(ctx, &dA.t, &dBt.t, &R.t), 0);
  int64_t sizes[2] = {n, n};
  int want[2] = {1, 1};
  fd_grad(ref_add, &n, 2, ins, sizes, want, n, R.d, g);
  ungrad(&dA), ungrad(&dBt);
  expect_close("add da", dA.t.data, dA.d, n);
  expect_close("add db", dBt.t.data, dBt.d, n);
  free(ref);
  drop(&A), drop(&Bt), drop(&O), drop(&R), drop(&dA), drop(&dBt);
}

/* ---- layernorm ---- */
typedef struct {
  int rows, C;
  double eps;
} ln_arg;
static void ref_ln(double *const *in, double *out, const void *p) {
  const ln_arg *a = p;
  for (int r = 0; r < a->rows; r++) {
    const double *x = in[0] + r * a->C;
    double m = 0, v = 0;
    for (int i = 0; i < a->C; i++) m += x[i];
    m /= a->C;
    for (int i = 0; i < a->C; i++) v += (x[i] - m) * (x[i] - m);
    v /= a->C;
    for (int i = 0; i < a->C; i++) out[r * a->C + i] = (x[i] - m) / sqrt(v + a->eps) * in[1][i] + in[2][i];
  }
}

Test(ops, layernorm) {
  ln_arg p = {6, 9, 1e-5};
  int64_t sx[3] = {2, 3, 9}, sw[1] = {9}, sr[2] = {2, 3};
  arg_t X = mk(3, sx, 51, 2.f), W = mk(1, sw, 52, 1.f), Bv = mk(1, sw, 53, 1.f);
  arg_t O = mk(3, sx, 54, 1.f), R = mk(3, sx, 55, 1.f), Mu = mk(2, sr, 56, 1.f), Rs = mk(2, sr, 57, 1.f);
  arg_t dX = mkgrad(&X), dW = mkgrad(&W), dB = mkgrad(&Bv);
  double *ins[3] = {X.d, W.d, Bv.d}, *ref = dalloc(O.n), *g[3] = {dX.d, dW.d, dB.d};
  ref_ln(ins, ref, &p);
  cr_assert_eq(tensor_layernorm_forward(ctx, &O.t, &Mu.t, &Rs.t, &X.t, &W.t, &Bv.t, 1e-5f), 0, "%s",
               tensor_last_error(ctx));
  expect_close("layernorm forward", O.t.data, ref, O.n);
  cr_assert_eq(tensor_layernorm_backward(ctx, &dX.t, &dW.t, &dB.t, &R.t, &X.t, &W.t, &Mu.t, &Rs.t), 0);
  int64_t sizes[3] = {X.n, W.n, Bv.n};
  int want[3] = {1, 1, 1};
  fd_grad(ref_ln, &p, 3, ins, sizes, want, O.n, R.d, g);
  ungrad(&dX), ungrad(&dW), ungrad(&dB);
  expect_close("layernorm din", dX.t.data, dX.d, dX.n);
  expect_close("layernorm dweight", dW.t.data, dW.d, dW.n);
  expect_close("layernorm dbias", dB.t.data, dB.d, dB.n);
  free(ref);
  drop(&X), drop(&W), drop(&Bv), drop(&O), drop(&R), drop(&Mu), drop(&Rs), drop(&dX), drop(&dW),
      drop(&dB);
}

/* ---- GELU ---- */
static void ref_gelu(double *const *in, double *out, const void *p) {
  for (int i = 0; i < *(const int *)p; i++) {
    double x = in[0][i];
    out[i] = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
}

Test(ops, gelu) {
  int n = 67; /* not a multiple of 8: the scalar tail runs too */
  int64_t s[1] = {n};
  arg_t X = mk(1, s, 61, 4.f), O = mk(1, s, 62, 1.f), R = mk(1, s, 63, 1.f), dX = mkgrad(&X);
  double *ins[1] = {X.d}, *ref = dalloc(n), *g[1] = {dX.d};
  ref_gelu(ins, ref, &n);
  cr_assert_eq(tensor_gelu_forward(ctx, &O.t, &X.t), 0);
  expect_close("gelu forward", O.t.data, ref, n);
  cr_assert_eq(tensor_gelu_backward(ctx, &dX.t, &R.t, &X.t), 0);
  int64_t sizes[1] = {n};
  int want[1] = {1};
  fd_grad(ref_gelu, &n, 1, ins, sizes, want, n, R.d, g);
  ungrad(&dX);
  expect_close("gelu din", dX.t.data, dX.d, n);
  free(ref);
  drop(&X), drop(&O), drop(&R), drop(&dX);
}

/* ---- attention ---- */
typedef struct {
  int B, T, C, NH;
} at_arg;
static void ref_attn(double *const *in, double *out, const void *p) {
  const at_arg *a = p;
  int hs = a->C / a->NH, C3 = 3 * a->C;
  double *w = dalloc(a->T);
  for (int b = 0; b < a->B; b++)
    for (int h = 0; h < a->NH; h++)
      for (int i = 0; i < a->T; i++) {
        const double *q = in[0] + (size_t)(b * a->T + i) * C3 + h * hs;
        double m = -1e300, s = 0;
        for (int j = 0; j <= i; j++) {
          const double *k = in[0] + (size_t)(b * a->T + j) * C3 + a->C + h * hs;
          double d = 0;
          for (int c = 0; c < hs; c++) d += q[c] * k[c];
          w[j] = d / sqrt((double)hs);
          m = w[j] > m ? w[j] : m;
        }
        for (int j = 0; j <= i; j++) s += (w[j] = exp(w[j] - m));
        for (int c = 0; c < hs; c++) {
          double y = 0;
          for (int j = 0; j <= i; j++) y += w[j] / s * in[0][(size_t)(b * a->T + j) * C3 + 2 * a->C + h * hs + c];
          out[(size_t)(b * a->T + i) * a->C + h * hs + c] = y;
        }
      }
  free(w);
}

static void check_attention(int B, int T, int NH, int hs) {
  at_arg p = {B, T, NH * hs, NH};
  int64_t sq[3] = {B, T, 3 * p.C}, so[3] = {B, T, p.C}, sl[3] = {B, NH, T};
  arg_t Q = mk(3, sq, 71, 1.5f), O = mk(3, so, 72, 1.f), R = mk(3, so, 73, 1.f), L = mk(3, sl, 74, 1.f);
  arg_t dQ = mkgrad(&Q);
  double *ins[1] = {Q.d}, *ref = dalloc(O.n), *g[1] = {dQ.d};
  ref_attn(ins, ref, &p);
  cr_assert_eq(tensor_attention_forward(ctx, &O.t, &L.t, &Q.t, NH), 0, "%s", tensor_last_error(ctx));
  expect_close("attention forward", O.t.data, ref, O.n);
  cr_assert_eq(tensor_attention_backward(ctx, &dQ.t, &R.t, &Q.t, &O.t, &L.t, NH), 0, "%s",
               tensor_last_error(ctx));
  int64_t sizes[1] = {Q.n};
  int want[1] = {1};
  fd_grad(ref_attn, &p, 1, ins, sizes, want, O.n, R.d, g);
  ungrad(&dQ);
  expect_close("attention dqkv", dQ.t.data, dQ.d, dQ.n);
  free(ref);
  drop(&Q), drop(&O), drop(&R), drop(&L), drop(&dQ);
}

/* Attention by blocks of keys (ring attention's): the sequence cut in nb
 * blocks of Tb, every query block against the key blocks in reverse order
 * (so that the online softmax rescales), gives the full causal attention's
 * output, log-sum-exp and gradients (tensor_attention_forward / _backward,
 * checked above against the formula and finite differences). Same
 * tolerances: both are f32 sums of O(1) terms in different orders. */
static void check_attention_blocks(int B, int nb, int Tb, int NH, int hs) {
  int T = nb * Tb, C = NH * hs;
  int64_t sq[3] = {B, T, 3 * C}, so[3] = {B, T, C}, sl[3] = {B, NH, T}, sb[3] = {B, Tb, C}, sr[3] = {B, NH, Tb};
  arg_t Q = mk(3, sq, 81, 1.5f), O = mk(3, so, 82, 1.f), R = mk(3, so, 83, 1.f), L = mk(3, sl, 84, 1.f);
  tensor_t dQ;
  cr_assert_eq(tensor_alloc(ctx, &dQ, TENSOR_F32, TENSOR_CPU, 3, sq), 0);
  cr_assert_eq(tensor_attention_forward(ctx, &O.t, &L.t, &Q.t, NH), 0);
  cr_assert_eq(tensor_attention_backward(ctx, &dQ, &R.t, &Q.t, &O.t, &L.t, NH), 0);
  /* per block: q, k, v, dout unpacked; acc, m, l, out, lse, d; dq, dk, dv */
  tensor_t q[8], k[8], v[8], go[8], acc[8], m[8], l[8], lse[8], d[8], dq[8], dk[8], dv[8];
  for (int i = 0; i < nb; i++) {
    tensor_t *bt[] = {&q[i], &k[i], &v[i], &go[i], &acc[i], &dq[i], &dk[i], &dv[i]}, *rt[] = {&m[i], &l[i], &lse[i], &d[i]};
    for (int j = 0; j < 8; j++) cr_assert_eq(tensor_alloc(ctx, bt[j], TENSOR_F32, TENSOR_CPU, 3, sb), 0);
    for (int j = 0; j < 4; j++) cr_assert_eq(tensor_alloc(ctx, rt[j], TENSOR_F32, TENSOR_CPU, 3, sr), 0);
    tensor_fill(ctx, &m[i], -INFINITY);
    for (int b = 0; b < B; b++)
      for (int t = 0; t < Tb; t++) {
        const float *row = (const float *)Q.t.data + ((size_t)b * T + i * Tb + t) * 3 * C;
        size_t o = ((size_t)b * Tb + t) * C;
        memcpy((float *)q[i].data + o, row, C * sizeof(float));
        memcpy((float *)k[i].data + o, row + C, C * sizeof(float));
        memcpy((float *)v[i].data + o, row + 2 * C, C * sizeof(float));
        memcpy((float *)go[i].data + o, (const float *)R.t.data + ((size_t)b * T + i * Tb + t) * C, C * sizeof(float));
      }
  }
  for (int i = 0; i < nb; i++) {
    for (int j = nb - 1; j >= 0; j--) /* (blocks ahead of the queries add nothing) */
      cr_assert_eq(tensor_attention_block_forward(ctx, &acc[i], &m[i], &l[i], &q[i], &k[j], &v[j], NH,
                                                  (int64_t)i * Tb, (int64_t)j * Tb),
                   0, "%s", tensor_last_error(ctx));
    cr_assert_eq(tensor_attention_block_finish(ctx, &acc[i], &lse[i], &acc[i], &m[i], &l[i], NH), 0, "%s",
                 tensor_last_error(ctx));
    cr_assert_eq(tensor_attention_block_rowdot(ctx, &d[i], &go[i], &acc[i], NH), 0);
  }
  for (int i = 0; i < nb; i++)
    for (int j = nb - 1; j >= 0; j--)
      cr_assert_eq(tensor_attention_block_backward(ctx, &dq[i], &dk[j], &dv[j], &go[i], &q[i], &k[j], &v[j], &lse[i],
                                                   &d[i], NH, (int64_t)i * Tb, (int64_t)j * Tb),
                   0, "%s", tensor_last_error(ctx));
  double worst = 0;
  for (int i = 0; i < nb; i++)
    for (int b = 0; b < B; b++)
      for (int t = 0; t < Tb; t++) {
        size_t o = ((size_t)b * Tb + t) * C, full = ((size_t)b * T + i * Tb + t);
        const tensor_t *blk[4] = {&acc[i], &dq[i], &dk[i], &dv[i]};
        const float *want[4] = {(const float *)O.t.data + full * C, (const float *)dQ.data + full * 3 * C,
                                (const float *)dQ.data + full * 3 * C + C, (const float *)dQ.data + full * 3 * C + 2 * C};
        for (int w = 0; w < 4; w++)
          for (int c = 0; c < C; c++) {
            double got = ((const float *)blk[w]->data)[o + c], ref = want[w][c], err = fabs(got - ref);
            cr_expect(err <= ATOL + RTOL * fabs(ref), "block %d row %d: %s[%d] %g, full attention %g", i, t,
                      (const char *[]){"out", "dq", "dk", "dv"}[w], c, got, ref);
            if (err > worst) worst = err;
          }
        for (int h = 0; h < NH; h++) {
          float got = ((const float *)lse[i].data)[((size_t)b * NH + h) * Tb + t];
          float ref = ((const float *)L.t.data)[((size_t)b * NH + h) * T + i * Tb + t];
          cr_expect(fabsf(got - ref) <= ATOL + RTOL * fabsf(ref), "lse block %d row %d: %g vs %g", i, t, got, ref);
        }
      }
  for (int i = 0; i < nb; i++) {
    tensor_t *all[] = {&q[i], &k[i], &v[i], &go[i], &acc[i], &m[i], &l[i], &lse[i], &d[i], &dq[i], &dk[i], &dv[i]};
    for (int j = 0; j < 12; j++) tensor_free(ctx, all[j]);
  }
  tensor_free(ctx, &dQ);
  drop(&Q), drop(&O), drop(&R), drop(&L);
}

Test(ops, attention_blocks) { check_attention_blocks(2, 3, 8, 2, 4); }
Test(ops, attention_blocks_uneven_heads) { check_attention_blocks(1, 4, 5, 3, 2); } /* rows shorter than a vector */

Test(ops, attention) { check_attention(2, 5, 2, 3); }
Test(ops, attention_long_rows) { check_attention(1, 19, 2, 4); } /* rows past the 8-wide vector loop */
Test(ops, attention_causal_blocks) { check_attention(1, 150, 1, 2); } /* 3 causal blocks, last partial */

/* Decode: the last row of the causal reference, from a cache holding the
 * keys and values of positions 0..len-1 (and garbage beyond, unread). */
static void check_decode(int B, int len, int Tmax, int NH, int hs) {
  at_arg p = {B, len, NH * hs, NH};
  int C = p.C;
  int64_t sq[3] = {B, len, 3 * C}, sqr[2] = {B, C}, sk[3] = {B, Tmax, C};
  arg_t QKV = mk(3, sq, 81, 1.5f), q = mk(2, sqr, 1, 1.f), o = mk(2, sqr, 2, 1.f);
  arg_t k = mk(3, sk, 3, 9.f), v = mk(3, sk, 4, 9.f);
  float *x = QKV.t.data, *qq = q.t.data, *kk = k.t.data, *vv = v.t.data;
  for (int b = 0; b < B; b++) {
    for (int c = 0; c < C; c++) qq[b * C + c] = x[((size_t)b * len + len - 1) * 3 * C + c];
    for (int t = 0; t < len; t++)
      for (int c = 0; c < C; c++) {
        kk[((size_t)b * Tmax + t) * C + c] = x[((size_t)b * len + t) * 3 * C + C + c];
        vv[((size_t)b * Tmax + t) * C + c] = x[((size_t)b * len + t) * 3 * C + 2 * C + c];
      }
  }
  double *ins[1] = {QKV.d}, *ref = dalloc((size_t)B * len * C), *last = dalloc((size_t)B * C);
  ref_attn(ins, ref, &p);
  for (int b = 0; b < B; b++) memcpy(last + b * C, ref + ((size_t)b * len + len - 1) * C, sizeof(double) * C);
  cr_assert_eq(tensor_attention_decode(ctx, &o.t, &q.t, &k.t, &v.t, len, NH), 0, "%s", tensor_last_error(ctx));
  expect_close("attention decode", o.t.data, last, (int64_t)B * C);
  cr_assert_eq(tensor_attention_decode(ctx, &o.t, &q.t, &k.t, &v.t, Tmax + 1, NH), STRATA_EINVAL);
  free(ref), free(last);
  drop(&QKV), drop(&q), drop(&o), drop(&k), drop(&v);
}

Test(ops, attention_decode) { check_decode(2, 7, 12, 2, 3); }
Test(ops, attention_decode_first) { check_decode(1, 1, 4, 3, 4); } /* one position: out = v */

/* ---- embedding ---- */
typedef struct {
  int B, T, C;
  const int32_t *ids;
} emb_arg;
static void ref_emb(double *const *in, double *out, const void *p) {
  const emb_arg *a = p;
  for (int bt = 0; bt < a->B * a->T; bt++)
    for (int c = 0; c < a->C; c++)
      out[bt * a->C + c] = in[0][a->ids[bt] * a->C + c] + in[1][(bt % a->T) * a->C + c];
}

Test(ops, embedding) {
  int32_t idv[6] = {3, 0, 3, 4, 1, 3}; /* repeated ids must accumulate */
  emb_arg p = {2, 3, 4, idv};
  int64_t se[2] = {5, 4}, sp[2] = {4, 4}, so[3] = {2, 3, 4};
  tensor_t ids = tensor_view2(idv, TENSOR_I32, TENSOR_CPU, 2, 3);
  arg_t E = mk(2, se, 81, 1.f), P = mk(2, sp, 82, 1.f), O = mk(3, so, 83, 1.f), R = mk(3, so, 84, 1.f);
  arg_t dE = mkgrad(&E), dP = mkgrad(&P);
  double *ins[2] = {E.d, P.d}, *ref = dalloc(O.n), *g[2] = {dE.d, dP.d};
  ref_emb(ins, ref, &p);
  cr_assert_eq(tensor_embedding_forward(ctx, &O.t, &ids, &E.t, &P.t), 0, "%s", tensor_last_error(ctx));
  expect_close("embedding forward", O.t.data, ref, O.n);
  cr_assert_eq(tensor_embedding_backward(ctx, &dE.t, &dP.t, &R.t, &ids), 0);
  int64_t sizes[2] = {E.n, P.n};
  int want[2] = {1, 1};
  fd_grad(ref_emb, &p, 2, ins, sizes, want, O.n, R.d, g);
  ungrad(&dE), ungrad(&dP);
  expect_close("embedding dwte", dE.t.data, dE.d, dE.n);
  expect_close("embedding dwpe", dP.t.data, dP.d, dP.n);
  idv[2] = 5; /* out of range */
  cr_expect_eq(tensor_embedding_forward(ctx, &O.t, &ids, &E.t, &P.t), STRATA_EINVAL);
  cr_expect(strstr(tensor_last_error(ctx), "ids[2] = 5") != NULL, "%s", tensor_last_error(ctx));
  free(ref);
  drop(&E), drop(&P), drop(&O), drop(&R), drop(&dE), drop(&dP);
}

/* ---- cross-entropy ---- */
typedef struct {
  int rows, V;
  const int32_t *t;
} xe_arg;
static void ref_xent(double *const *in, double *out, const void *p) {
  const xe_arg *a = p;
  for (int r = 0; r < a->rows; r++) {
    const double *z = in[0] + r * a->V;
    double m = -1e300, s = 0;
    for (int i = 0; i < a->V; i++) m = z[i] > m ? z[i] : m;
    for (int i = 0; i < a->V; i++) s += exp(z[i] - m);
    out[r] = a->t[r] >= 0 ? m + log(s) - z[a->t[r]] : 0;
  }
}

Test(ops, softmax_cross_entropy) {
  int32_t tv[5] = {2, 0, 10, -1, 7};
  xe_arg p = {5, 11, tv};
  int64_t sz[2] = {5, 11}, sr[1] = {5};
  tensor_t tg = tensor_view1(tv, TENSOR_I32, TENSOR_CPU, 5);
  arg_t Z = mk(2, sz, 91, 5.f), Lo = mk(1, sr, 92, 1.f), Ls = mk(1, sr, 93, 1.f), dZ = mkgrad(&Z);
  double *ins[1] = {Z.d}, *ref = dalloc(5), *g[1] = {dZ.d}, R[5];
  ref_xent(ins, ref, &p);
  cr_assert_eq(tensor_xent_forward(ctx, &Lo.t, &Ls.t, &Z.t, &tg), 0, "%s", tensor_last_error(ctx));
  expect_close("xent losses", Lo.t.data, ref, 5);
  float dloss = 0.37f;
  for (int i = 0; i < 5; i++) R[i] = dloss;
  cr_assert_eq(tensor_xent_backward(ctx, &dZ.t, &Z.t, &Ls.t, &tg, dloss), 0);
  int64_t sizes[1] = {Z.n};
  int want[1] = {1};
  fd_grad(ref_xent, &p, 1, ins, sizes, want, 5, R, g);
  ungrad(&dZ);
  expect_close("xent dlogits", dZ.t.data, dZ.d, dZ.n);
  tv[1] = 11;
  cr_expect_eq(tensor_xent_forward(ctx, &Lo.t, &Ls.t, &Z.t, &tg), STRATA_EINVAL);
  free(ref);
  drop(&Z), drop(&Lo), drop(&Ls), drop(&dZ);
}

Test(ops, cross_entropy_large_vocab) {
  /* V = 50304 runs the vector exp over long rows; the loss of uniform logits is ln V. */
  int64_t sz[2] = {2, 50304}, sr[1] = {2};
  int32_t tv[2] = {5, 50303};
  tensor_t tg = tensor_view1(tv, TENSOR_I32, TENSOR_CPU, 2), z, l, s;
  cr_assert_eq(tensor_alloc(ctx, &z, TENSOR_F32, TENSOR_CPU, 2, sz), 0);
  cr_assert_eq(tensor_alloc(ctx, &l, TENSOR_F32, TENSOR_CPU, 1, sr), 0);
  cr_assert_eq(tensor_alloc(ctx, &s, TENSOR_F32, TENSOR_CPU, 1, sr), 0);
  cr_assert_eq(tensor_fill(ctx, &z, 3.f), 0);
  cr_assert_eq(tensor_xent_forward(ctx, &l, &s, &z, &tg), 0);
  for (int i = 0; i < 2; i++)
    cr_expect(fabs(((float *)l.data)[i] - log(50304.0)) < 2e-4, "loss %f", ((float *)l.data)[i]);
  tensor_free(ctx, &z), tensor_free(ctx, &l), tensor_free(ctx, &s);
}

/* ---- dropout ---- */
Test(ops, dropout) {
  int64_t s[1] = {1000};
  float p = 0.3f;
  arg_t X = mk(1, s, 101, 1.f), O = mk(1, s, 102, 1.f), R = mk(1, s, 103, 1.f), dX = mkgrad(&X);
  cr_assert_eq(tensor_dropout_forward(ctx, &O.t, &X.t, p, 9, "drop", 500), 0);
  cr_assert_eq(tensor_dropout_backward(ctx, &dX.t, &R.t, p, 9, "drop", 500), 0);
  uint32_t key[2], r[4];
  tensor_rng_key(key, 9, "drop");
  int kept = 0;
  for (int i = 0; i < 1000; i++) {
    uint32_t c[4] = {(uint32_t)(500 + i), 0, 0, 0};
    tensor_philox(r, key, c);
    int keep = (double)(r[0] >> 8) / 16777216.0 >= p;
    kept += keep;
    double ref = keep ? ((float *)X.t.data)[i] / (1 - p) : 0, dref = keep ? ((float *)R.t.data)[i] / (1 - p) : 0;
    cr_expect(fabs(((float *)O.t.data)[i] - ref) < 1e-6, "dropout out[%d]", i);
    cr_expect(fabs(((float *)dX.t.data)[i] - G0 - dref) < 1e-6, "dropout din[%d]", i);
  }
  /* Binomial(1000, 0.7): mean 700, sd 14.5; +-6 sd never fails by chance. */
  cr_expect(kept > 613 && kept < 787, "kept %d of 1000 at p = 0.3", kept);
  drop(&X), drop(&O), drop(&R), drop(&dX);
}

/* ---- casts ---- */
Test(ops, casts) {
  int64_t s[1] = {300};
  arg_t X = mk(1, s, 111, 70000.f); /* beyond f16's range: overflow to inf */
  tensor_t h, bf, back;
  cr_assert_eq(tensor_alloc(ctx, &h, TENSOR_F16, TENSOR_CPU, 1, s), 0);
  cr_assert_eq(tensor_alloc(ctx, &bf, TENSOR_BF16, TENSOR_CPU, 1, s), 0);
  cr_assert_eq(tensor_alloc(ctx, &back, TENSOR_F32, TENSOR_CPU, 1, s), 0);
  cr_assert_eq(tensor_cast(ctx, &h, &X.t), 0);
  cr_assert_eq(tensor_cast(ctx, &bf, &X.t), 0);
  const float *x = X.t.data;
  for (int i = 0; i < 300; i++) {
    cr_expect_eq(((uint16_t *)h.data)[i], strata_f32_to_f16(x[i]));
    cr_expect_eq(((uint16_t *)bf.data)[i], strata_f32_to_bf16(x[i]));
  }
  cr_assert_eq(tensor_cast(ctx, &back, &bf), 0);
  for (int i = 0; i < 300; i++) /* bf16 keeps 8 significant bits: rounding error <= half an ulp = 2^-8 relative */
    cr_expect(fabsf(((float *)back.data)[i] - x[i]) <= fabsf(x[i]) * (1.f / 256), "bf16 round trip %d", i);
  tensor_t bad = tensor_view1(back.data, TENSOR_F32, TENSOR_CPU, 299);
  cr_expect_eq(tensor_cast(ctx, &bad, &bf), STRATA_ESHAPE);
  tensor_free(ctx, &h), tensor_free(ctx, &bf), tensor_free(ctx, &back);
  drop(&X);
}

/* ---- vocabulary-parallel embedding and cross-entropy ----
 * The table and the logits cut into two slices: the slices' embeddings sum
 * to the whole one (positions added by one slice), their log-sum-exps and
 * target logits combine into the whole row's loss, and their gradients are
 * the whole gradients' slices; another slice's ids and targets are no
 * error. The same values in another order: fp32 rounding only (1e-6). */
Test(ops, vocab_slices) {
  int32_t idv[6] = {3, 0, 3, 4, 1, 3}, tv[6] = {2, 0, 5, -1, 4, 3};
  int64_t se[2] = {6, 4}, sp[2] = {4, 4}, so[3] = {2, 3, 4}, sz[2] = {6, 6}, sr[1] = {6};
  tensor_t ids = tensor_view2(idv, TENSOR_I32, TENSOR_CPU, 2, 3), tg = tensor_view1(tv, TENSOR_I32, TENSOR_CPU, 6);
  arg_t E = mk(2, se, 91, 1.f), P = mk(2, sp, 92, 1.f), O = mk(3, so, 93, 1.f), S = mk(3, so, 94, 1.f);
  arg_t Z = mk(2, sz, 95, 2.f), L = mk(1, sr, 96, 1.f), Ls = mk(1, sr, 97, 1.f), dZ = mk(2, sz, 98, 0.f);
  arg_t ls[2] = {mk(1, sr, 99, 1.f), mk(1, sr, 100, 1.f)}, zt[2] = {mk(1, sr, 101, 1.f), mk(1, sr, 102, 1.f)};
  float *e = E.t.data, *z = Z.t.data, *o = O.t.data, *s = S.t.data, *dz = dZ.t.data;
  cr_assert_eq(tensor_embedding_forward(ctx, &O.t, &ids, &E.t, &P.t), 0);
  memset(s, 0, sizeof(float) * 24);
  for (int k = 0; k < 2; k++) { /* rows [3k, 3k + 3) of the table */
    tensor_t ek = tensor_view2(e + 12 * k, TENSOR_F32, TENSOR_CPU, 3, 4);
    arg_t part = mk(3, so, 110 + k, 1.f);
    cr_assert_eq(tensor_embedding_slice_forward(ctx, &part.t, &ids, &ek, k == 0 ? &P.t : NULL, 3 * k), 0, "%s",
                 tensor_last_error(ctx));
    for (int i = 0; i < 24; i++) s[i] += ((float *)part.t.data)[i];
    drop(&part);
  }
  for (int i = 0; i < 24; i++) cr_expect(fabsf(s[i] - o[i]) <= 1e-6f, "embedding %d: %g vs %g", i, s[i], o[i]);
  cr_assert_eq(tensor_xent_forward(ctx, &L.t, &Ls.t, &Z.t, &tg), 0);
  float dloss = 0.25f, part[36] = {0};
  cr_assert_eq(tensor_xent_backward(ctx, &dZ.t, &Z.t, &Ls.t, &tg, dloss), 0);
  for (int k = 0; k < 2; k++) { /* columns [3k, 3k + 3): copied out as (6, 3) slices */
    float zk[18];
    for (int r = 0; r < 6; r++) memcpy(zk + 3 * r, z + 6 * r + 3 * k, 3 * sizeof(float));
    tensor_t tk = tensor_view2(zk, TENSOR_F32, TENSOR_CPU, 6, 3);
    cr_assert_eq(tensor_xent_slice_forward(ctx, &ls[k].t, &zt[k].t, &tk, &tg, 3 * k), 0, "%s", tensor_last_error(ctx));
  }
  float lse[6];
  for (int r = 0; r < 6; r++) {
    float a = ((float *)ls[0].t.data)[r], b = ((float *)ls[1].t.data)[r], mx = fmaxf(a, b);
    lse[r] = mx + logf(expf(a - mx) + expf(b - mx));
    float loss = tv[r] >= 0 ? lse[r] - ((float *)zt[0].t.data)[r] - ((float *)zt[1].t.data)[r] : 0.f;
    cr_expect(fabsf(loss - ((float *)L.t.data)[r]) <= 1e-6f, "row %d: loss %g vs %g", r, loss, ((float *)L.t.data)[r]);
  }
  { /* the same combination by tensor_xent_slice_combine: the slices' lse gathered as (2, 6), the target
       logits summed, the losses in place of the sums */
    float parts[12], sums[6], lse2[6];
    for (int r = 0; r < 6; r++) {
      parts[r] = ((float *)ls[0].t.data)[r], parts[6 + r] = ((float *)ls[1].t.data)[r];
      sums[r] = ((float *)zt[0].t.data)[r] + ((float *)zt[1].t.data)[r];
    }
    tensor_t tp = tensor_view2(parts, TENSOR_F32, TENSOR_CPU, 2, 6), ts = tensor_view1(sums, TENSOR_F32, TENSOR_CPU, 6);
    tensor_t tl2 = tensor_view1(lse2, TENSOR_F32, TENSOR_CPU, 6);
    cr_assert_eq(tensor_xent_slice_combine(ctx, &tl2, &ts, &tp, &ts, &tg), 0, "%s", tensor_last_error(ctx));
    for (int r = 0; r < 6; r++) {
      cr_expect(fabsf(lse2[r] - lse[r]) <= 1e-6f, "combined row %d: lse %g vs %g", r, lse2[r], lse[r]);
      cr_expect(fabsf(sums[r] - ((float *)L.t.data)[r]) <= 1e-6f, "combined row %d: loss %g vs %g", r, sums[r],
                ((float *)L.t.data)[r]);
    }
    tensor_t short5 = tensor_view1(lse2, TENSOR_F32, TENSOR_CPU, 5);
    cr_expect_eq(tensor_xent_slice_combine(ctx, &short5, &ts, &tp, &ts, &tg), STRATA_ESHAPE);
  }
  tensor_t tl = tensor_view1(lse, TENSOR_F32, TENSOR_CPU, 6);
  for (int k = 0; k < 2; k++) {
    float zk[18], dk[18] = {0};
    for (int r = 0; r < 6; r++) memcpy(zk + 3 * r, z + 6 * r + 3 * k, 3 * sizeof(float));
    tensor_t tk = tensor_view2(zk, TENSOR_F32, TENSOR_CPU, 6, 3), dt = tensor_view2(dk, TENSOR_F32, TENSOR_CPU, 6, 3);
    cr_assert_eq(tensor_xent_slice_backward(ctx, &dt, &tk, &tl, &tg, dloss, 3 * k), 0);
    for (int r = 0; r < 6; r++) memcpy(part + 6 * r + 3 * k, dk + 3 * r, 3 * sizeof(float));
  }
  for (int i = 0; i < 36; i++) cr_expect(fabsf(part[i] - dz[i]) <= 1e-6f, "dlogits %d: %g vs %g", i, part[i], dz[i]);
  drop(&E), drop(&P), drop(&O), drop(&S), drop(&Z), drop(&L), drop(&Ls), drop(&dZ);
  for (int k = 0; k < 2; k++) drop(&ls[k]), drop(&zt[k]);
}

/* tensor_copy_columns (ring attention's q|k|v split and gradient sum): a
 * block of columns copied or added, exactly (one f32 add per element); a
 * range past a width or rows that differ are refused naming the numbers. */
Test(ops, copy_columns) {
  int64_t sa[3] = {2, 5, 12}, sb[2] = {10, 7};
  tensor_t a, b;
  cr_assert_eq(tensor_alloc(ctx, &a, TENSOR_F32, TENSOR_CPU, 3, sa), 0);
  cr_assert_eq(tensor_alloc(ctx, &b, TENSOR_F32, TENSOR_CPU, 2, sb), 0);
  float *x = a.data, *y = b.data;
  for (int i = 0; i < 120; i++) x[i] = (float)i * 0.5f;
  for (int i = 0; i < 70; i++) y[i] = -(float)i;
  cr_assert_eq(tensor_copy_columns(ctx, &b, 2, &a, 4, 5, 0), 0, "%s", tensor_last_error(ctx));
  for (int r = 0; r < 10; r++)
    for (int c = 0; c < 7; c++)
      cr_expect_eq(y[r * 7 + c], c >= 2 ? x[r * 12 + 4 + c - 2] : -(float)(r * 7 + c), "row %d col %d", r, c);
  cr_assert_eq(tensor_copy_columns(ctx, &a, 0, &b, 1, 3, 1), 0, "%s", tensor_last_error(ctx));
  for (int r = 0; r < 10; r++)
    for (int c = 0; c < 12; c++) {
      float want = (float)(r * 12 + c) * 0.5f + (c < 3 ? y[r * 7 + 1 + c] : 0.f);
      cr_expect_eq(x[r * 12 + c], want, "row %d col %d", r, c);
    }
  cr_expect_eq(tensor_copy_columns(ctx, &b, 3, &a, 0, 5, 0), STRATA_ESHAPE);
  cr_expect(strstr(tensor_last_error(ctx), "[3, 8) of dst (width 7)"), "%s", tensor_last_error(ctx));
  int64_t sc[2] = {9, 7};
  tensor_t c;
  cr_assert_eq(tensor_alloc(ctx, &c, TENSOR_F32, TENSOR_CPU, 2, sc), 0);
  cr_expect_eq(tensor_copy_columns(ctx, &c, 0, &a, 0, 2, 0), STRATA_ESHAPE);
  cr_expect(strstr(tensor_last_error(ctx), "differ in rows (9, 10)"), "%s", tensor_last_error(ctx));
  tensor_free(ctx, &a), tensor_free(ctx, &b), tensor_free(ctx, &c);
}
