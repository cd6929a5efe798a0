/* tensor_layernorm_split_* (rows cut by columns over P ranks, the rows'
 * sums added between the phases as an allreduce would) against
 * tensor_layernorm_forward/backward on the whole rows, for P = 1, 2, 4;
 * tensor_transpose against the index formula; the errors.
 *
 * Tolerances: both sides compute in f32 from the same inputs; the whole
 * row's op sums C = 48 floats in float, the split one in double per block
 * and then P floats: the statistics differ by a few ulps of O(1) values
 * (about 1e-6), and out, din by a few ulps more after the products. atol
 * 2e-5 + rtol 1e-4 (as test_ops.c) is 10x above that and far below what a
 * wrong term does (a missing block in a sum, a mean not divided by C, a
 * statistic of the wrong row: errors of O(0.1)). The transpose moves or
 * adds each element once: exact. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "refcheck.h"

#define ATOL 2e-5
#define RTOL 1e-4
#define R 12
#define C 48

static tensor_ctx_t *ctx;
static void setup(void) {
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.threads = 2;
  cr_assert_eq(tensor_ctx_create(&ctx, &o), 0);
}
static void teardown(void) { tensor_ctx_destroy(ctx); }
TestSuite(layernorm_split, .init = setup, .fini = teardown);

static void close_to(const char *what, const float *got, const float *want, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    cr_assert(fabs((double)got[i] - want[i]) <= ATOL + RTOL * fabs((double)want[i]), "%s[%lld]: %.9g, want %.9g", what,
              (long long)i, (double)got[i], (double)want[i]);
}

static tensor_t vec(float *p, int64_t n) { return tensor_view1(p, TENSOR_F32, TENSOR_CPU, n); }
static tensor_t mat(float *p, int64_t r, int64_t c) { return tensor_view2(p, TENSOR_F32, TENSOR_CPU, r, c); }

/* Column block b of P of x (R x C) into blk (R x C / P). */
static void block_of(float *blk, const float *x, int b, int P) {
  int A = C / P;
  for (int r = 0; r < R; r++) memcpy(blk + r * A, x + r * C + b * A, sizeof(float) * (size_t)A);
}

/* The split layernorm over P blocks, forward and backward, against the whole rows'. */
static void versus_whole(int P) {
  int A = C / P;
  float x[R * C], w[C], b[C], dy[R * C], out[R * C], mean[R], rstd[R], din[R * C], dw[C], db[C];
  rnd(x, R * C, 1, 2.f), rnd(w, C, 2, 1.f), rnd(b, C, 3, 1.f), rnd(dy, R * C, 4, 1.f);
  for (int i = 0; i < R * C; i++) x[i] += 0.5f; /* (a mean away from 0) */
  memset(din, 0, sizeof din), memset(dw, 0, sizeof dw), memset(db, 0, sizeof db);
  tensor_t tx = mat(x, R, C), tw = vec(w, C), tb = vec(b, C), to = mat(out, R, C), tm = vec(mean, R),
           ts = vec(rstd, R), tdy = mat(dy, R, C), tdin = mat(din, R, C), tdw = vec(dw, C), tdb = vec(db, C);
  cr_assert_eq(tensor_layernorm_forward(ctx, &to, &tm, &ts, &tx, &tw, &tb, 1e-5f), 0);
  cr_assert_eq(tensor_layernorm_backward(ctx, &tdin, &tdw, &tdb, &tdy, &tx, &tw, &tm, &ts), 0);

  float xs[4][R * C], dys[4][R * C], mus[4][R], rss[4][R], outs[4][R * C], dins[4][R * C], st[4][2 * R];
  float dws[4][C], dbs[4][C];
  for (int k = 0; k < P; k++) {
    block_of(xs[k], x, k, P), block_of(dys[k], dy, k, P);
    for (int i = 0; i < R * A; i++) dins[k][i] = 0.25f; /* the backward adds */
    memset(dws[k], 0, sizeof dws[k]), memset(dbs[k], 0, sizeof dbs[k]);
  }
  for (int phase = 0; phase < 3; phase++) {
    for (int k = 0; k < P; k++) {
      tensor_t bx = mat(xs[k], R, A), bo = mat(outs[k], R, A), bm = vec(mus[k], R), bs = vec(rss[k], R),
               bw = vec(w + k * A, A), bb = vec(b + k * A, A);
      cr_assert_eq(tensor_layernorm_split_forward(ctx, &bo, &bm, &bs, &bx, &bw, &bb, C, 1e-5f, phase), 0, "%s",
                   tensor_last_error(ctx));
    }
    if (phase == 2) break;
    for (int r = 0; r < R; r++) { /* the allreduce of the rows' partial sums */
      float s = 0;
      for (int k = 0; k < P; k++) s += phase ? rss[k][r] : mus[k][r];
      for (int k = 0; k < P; k++) (phase ? rss[k] : mus[k])[r] = s;
    }
  }
  for (int k = 0; k < P; k++) {
    float want[R * C];
    block_of(want, out, k, P);
    close_to("out", outs[k], want, R * A);
    close_to("mean", mus[k], mean, R);
    close_to("rstd", rss[k], rstd, R);
  }
  for (int phase = 0; phase < 2; phase++) {
    for (int k = 0; k < P; k++) {
      tensor_t bx = mat(xs[k], R, A), bdy = mat(dys[k], R, A), bdin = mat(dins[k], R, A), bm = vec(mus[k], R),
               bs = vec(rss[k], R), bw = vec(w + k * A, A), bst = vec(st[k], 2 * R), bdw = vec(dws[k], A),
               bdb = vec(dbs[k], A);
      cr_assert_eq(tensor_layernorm_split_backward(ctx, phase ? &bdin : NULL, phase ? NULL : &bdw,
                                                   phase ? NULL : &bdb, &bst, &bdy, &bx, &bw, &bm, &bs, C, phase),
                   0, "%s", tensor_last_error(ctx));
    }
    if (phase == 1) break;
    for (int r = 0; r < 2 * R; r++) {
      float s = 0;
      for (int k = 0; k < P; k++) s += st[k][r];
      for (int k = 0; k < P; k++) st[k][r] = s;
    }
  }
  for (int k = 0; k < P; k++) {
    float want[R * C];
    block_of(want, din, k, P);
    for (int i = 0; i < R * A; i++) dins[k][i] -= 0.25f;
    close_to("din", dins[k], want, R * A);
    close_to("dweight", dws[k], dw + k * A, A);
    close_to("dbias", dbs[k], db + k * A, A);
  }
}

Test(layernorm_split, one_block) { versus_whole(1); }
Test(layernorm_split, two_blocks) { versus_whole(2); }
Test(layernorm_split, four_blocks) { versus_whole(4); }

Test(layernorm_split, errors) {
  float x[R * C] = {0}, m[R] = {0}, s[R] = {0}, st[2 * R] = {0}, w[C] = {0};
  tensor_t tx = mat(x, R, C), tm = vec(m, R), ts = vec(s, R), tst = vec(st, 2 * R), tw = vec(w, C);
  cr_assert_eq(tensor_layernorm_split_forward(ctx, NULL, &tm, &ts, &tx, NULL, NULL, C, 1e-5f, 3), STRATA_EINVAL);
  cr_assert(strstr(tensor_last_error(ctx), "phase 3"), "%s", tensor_last_error(ctx));
  cr_assert_eq(tensor_layernorm_split_forward(ctx, NULL, &tm, &ts, &tx, NULL, NULL, C / 2, 1e-5f, 0), STRATA_EINVAL);
  cr_assert(strstr(tensor_last_error(ctx), "C = 24"), "%s", tensor_last_error(ctx));
  cr_assert_eq(tensor_layernorm_split_forward(ctx, NULL, &tm, &ts, &tx, NULL, NULL, C, 1e-5f, 2), STRATA_EINVAL);
  tensor_t short_st = vec(st, R);
  cr_assert_eq(tensor_layernorm_split_backward(ctx, NULL, NULL, NULL, &short_st, &tx, &tx, &tw, &tm, &ts, C, 0),
               STRATA_ESHAPE);
  cr_assert(strstr(tensor_last_error(ctx), "stats"), "%s", tensor_last_error(ctx));
  cr_assert_eq(tensor_layernorm_split_backward(ctx, NULL, NULL, NULL, &tst, &tx, &tx, &tw, &tm, &ts, C, 1),
               STRATA_EINVAL);
}

Test(layernorm_split, transpose) {
  enum { NR = 37, NC = 70 }; /* (not multiples of the 32-wide blocks) */
  static float a[NR * NC], t[NC * NR], acc[NC * NR];
  rnd(a, NR * NC, 5, 1.f), rnd(acc, NC * NR, 6, 1.f);
  float base[NC * NR];
  memcpy(base, acc, sizeof base);
  tensor_t ta = mat(a, NR, NC), tt = mat(t, NC, NR), tacc = mat(acc, NC, NR);
  cr_assert_eq(tensor_transpose(ctx, &tt, &ta, 0), 0);
  cr_assert_eq(tensor_transpose(ctx, &tacc, &ta, 1), 0);
  for (int i = 0; i < NR; i++)
    for (int j = 0; j < NC; j++) {
      cr_assert_eq(t[j * NR + i], a[i * NC + j]);
      cr_assert_eq(acc[j * NR + i], base[j * NR + i] + a[i * NC + j]);
    }
  tensor_t wrong = mat(t, NR, NC);
  cr_assert_eq(tensor_transpose(ctx, &wrong, &ta, 0), STRATA_ESHAPE);
  cr_assert(strstr(tensor_last_error(ctx), "transposed"), "%s", tensor_last_error(ctx));
}
