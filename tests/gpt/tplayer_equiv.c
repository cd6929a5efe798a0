/* One transformer layer under 1D, 2D, 2.5D and 3D tensor parallelism
 * (strata/par_tplayer.h) against the serial layer built here from
 * libtensor's whole-tensor ops (mpirun -np N tplayer_equiv MODE [DEPTH]:
 * 1 with every mode at q = 1; 4 with 1d and 2d; 8 with 1d, "2.5d 2" and
 * 3d). Every rank draws the whole input, output gradient and parameters
 * from one seed; the layer gets its blocks. Checked:
 *   - the output's and the input gradient's blocks, and every parameter's
 *     gradient (gathered), equal the serial layer's within 2e-5 relative to
 *     the largest element: the sums differ only in their order (blocked
 *     products and statistics, at most 4C = 128 terms of O(1) in fp32,
 *     about 1e-6), and the layernorm's rstd of O(1) does not amplify them;
 *   - a second backward adds to the gradients (they double);
 *   - the bytes each rank sends for one forward and backward equal
 *     par_plan_tp_layer_sent, the formula derived for each mode, and the
 *     ranks it talks to are the mode's partners: 1D tp - 1, 2D 2 (q - 1),
 *     2.5D 2 (q - 1) + d - 1, 3D 3 (q - 1);
 *   - parameters drawn by global index equal the serial model's
 *     (par_gpt's layer 0 of the same seed);
 *   - shapes the mode cannot cut are refused by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/par_gpt.h>
#include <strata/par_plan.h>
#include <strata/par_tplayer.h>

#include "gpt/mpi_check.h"

enum { B = 4, T = 8, C = 32, NH = 8, R = B * T };

static tensor_t mk(tensor_ctx_t *tc, int nd, int64_t a, int64_t b, int64_t c) {
  int64_t s[3] = {a, b, c};
  tensor_t t;
  if (tensor_alloc(tc, &t, TENSOR_F32, TENSOR_CPU, nd, s) || tensor_zero(tc, &t)) MPI_Abort(MPI_COMM_WORLD, 1);
  return t;
}

/* The serial layer: y = layer(x), dx and the parameters' gradients from dy. */
typedef struct {
  tensor_t p[12], dp[12], y, dx;
} serial_t;

static void serial(tensor_ctx_t *tc, serial_t *s, const float *X, const float *DY) {
  enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB };
  tensor_t x = mk(tc, 3, B, T, C), dy = mk(tc, 3, B, T, C), ln1 = mk(tc, 3, B, T, C), m1 = mk(tc, 1, R, 0, 0),
           r1 = mk(tc, 1, R, 0, 0), qkv = mk(tc, 3, B, T, 3 * C), att = mk(tc, 3, B, T, C), lse = mk(tc, 3, B, NH, T),
           pr = mk(tc, 3, B, T, C), res2 = mk(tc, 3, B, T, C), ln2 = mk(tc, 3, B, T, C), m2 = mk(tc, 1, R, 0, 0),
           r2 = mk(tc, 1, R, 0, 0), fch = mk(tc, 3, B, T, 4 * C), gel = mk(tc, 3, B, T, 4 * C),
           o = mk(tc, 3, B, T, C), dgel = mk(tc, 3, B, T, 4 * C), dfch = mk(tc, 3, B, T, 4 * C),
           dln = mk(tc, 3, B, T, C), dres = mk(tc, 3, B, T, C), datt = mk(tc, 3, B, T, C),
           dqkv = mk(tc, 3, B, T, 3 * C);
  s->y = mk(tc, 3, B, T, C), s->dx = mk(tc, 3, B, T, C);
  memcpy(x.data, X, sizeof(float) * R * C), memcpy(dy.data, DY, sizeof(float) * R * C);
  tensor_t *p = s->p, *g = s->dp;
  int rc = tensor_layernorm_forward(tc, &ln1, &m1, &r1, &x, &p[LN1W], &p[LN1B], 1e-5f) ||
           tensor_linear_forward(tc, &qkv, &ln1, &p[QKVW], &p[QKVB]) ||
           tensor_attention_forward(tc, &att, &lse, &qkv, NH) || tensor_linear_forward(tc, &pr, &att, &p[PROJW], &p[PROJB]) ||
           tensor_add_forward(tc, &res2, &x, &pr) ||
           tensor_layernorm_forward(tc, &ln2, &m2, &r2, &res2, &p[LN2W], &p[LN2B], 1e-5f) ||
           tensor_linear_forward(tc, &fch, &ln2, &p[FCW], &p[FCB]) || tensor_gelu_forward(tc, &gel, &fch) ||
           tensor_linear_forward(tc, &o, &gel, &p[FCPW], &p[FCPB]) || tensor_add_forward(tc, &s->y, &res2, &o);
  memcpy(dres.data, DY, sizeof(float) * R * C);
  rc = rc || tensor_linear_backward(tc, &dgel, &g[FCPW], &g[FCPB], &dy, &gel, &p[FCPW]) ||
       tensor_gelu_backward(tc, &dfch, &dgel, &fch) || tensor_linear_backward(tc, &dln, &g[FCW], &g[FCB], &dfch, &ln2, &p[FCW]) ||
       tensor_layernorm_backward(tc, &dres, &g[LN2W], &g[LN2B], &dln, &res2, &p[LN2W], &m2, &r2) ||
       tensor_linear_backward(tc, &datt, &g[PROJW], &g[PROJB], &dres, &att, &p[PROJW]) ||
       tensor_attention_backward(tc, &dqkv, &datt, &qkv, &att, &lse, NH) || tensor_zero(tc, &dln) ||
       tensor_linear_backward(tc, &dln, &g[QKVW], &g[QKVB], &dqkv, &ln1, &p[QKVW]);
  memcpy(s->dx.data, dres.data, sizeof(float) * R * C);
  rc = rc || tensor_layernorm_backward(tc, &s->dx, &g[LN1W], &g[LN1B], &dln, &x, &p[LN1W], &m1, &r1);
  if (rc) {
    fprintf(stderr, "serial layer: %s\n", tensor_last_error(tc));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

static double maxabs(const float *a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
  return m;
}

/* got (n) against want, within 2e-5 of want's largest element (times scale). */
static void near(const char *what, const float *got, const float *want, int64_t n, double scale) {
  double tol = 2e-5 * fmax(maxabs(want, n) * scale, 1e-6);
  for (int64_t i = 0; i < n; i++)
    if (fabs(got[i] - scale * want[i]) > tol) {
      CHECK(0, "%s[%lld]: %g, serial %g (tolerance %g)", what, (long long)i, got[i], scale * want[i], tol);
      return;
    }
}

/* The block (rows r0.., cols c0..) of a whole R x C activation. */
static void cut(float *blk, const float *whole, int64_t rows, int64_t cols, int64_t r0, int64_t c0) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) blk[r * cols + c] = whole[(r0 + r) * C + c0 + c];
}

static par_tp_mode_t parse_mode(const char *s) {
  return !strcmp(s, "2d") ? PAR_TP_2D : !strcmp(s, "2.5d") ? PAR_TP_2P5D : !strcmp(s, "3d") ? PAR_TP_3D : PAR_TP_1D;
}

static int partners_of(par_tp_mode_t m, int n, int d) {
  int q = m == PAR_TP_3D ? (int)lround(cbrt(n)) : (int)lround(sqrt((double)n / d));
  return m == PAR_TP_1D ? n - 1 : m == PAR_TP_3D ? 3 * (q - 1) : 2 * (q - 1) + d - 1;
}

static void run(comm_t *world, tensor_ctx_t *tc, par_tp_mode_t mode, int depth) {
  par_tplayer_config_t cfg = {.mode = mode, .depth = depth, .batch = B, .seq = T, .hidden = C, .heads = NH, .seed = 7};
  par_tplayer_t *L;
  char err[512];
  if (par_tplayer_create(&L, world, tc, &cfg, err, sizeof err)) {
    CHECK(0, "create: %s", err);
    return;
  }
  /* the parameters drawn by global index are par_gpt's layer 0 */
  par_gpt_config_t gc = {.vocab = 64, .seq = T, .layers = 1, .heads = NH, .hidden = C};
  par_gpt_t *ref = NULL;
  CHECK(par_gpt_create(&ref, &gc, 7) == STRATA_OK, "par_gpt_create");
  for (int i = 0; ref && i < par_tplayer_nparams(); i++) {
    int64_t n, k;
    par_tplayer_param_shape(L, i, &n, &k);
    size_t numel = (size_t)(n * (k ? k : 1));
    float *got = malloc(sizeof(float) * numel);
    char nm[64];
    snprintf(nm, sizeof nm, "h.0.%s", par_tplayer_param_name(i));
    const par_gpt_view_t *v = par_gpt_find_view(ref, nm);
    const float *want = v ? par_gpt_params(ref, NULL) + v->offset : NULL;
    CHECK(par_tplayer_get(L, i, 0, got) == STRATA_OK && v && v->numel == numel, "%s", nm);
    for (size_t e = 0; want && e < numel; e++)
      if (got[e] != want[e]) {
        CHECK(0, "%s[%zu] drawn %g, par_gpt %g", nm, e, got[e], want[e]);
        break;
      }
    free(got);
  }
  par_gpt_destroy(ref);

  /* random parameters (the biases and layernorms too), input and gradient */
  serial_t s;
  for (int i = 0; i < par_tplayer_nparams(); i++) {
    int64_t n, k;
    par_tplayer_param_shape(L, i, &n, &k);
    s.p[i] = k ? mk(tc, 2, n, k, 0) : mk(tc, 1, n, 0, 0), s.dp[i] = k ? mk(tc, 2, n, k, 0) : mk(tc, 1, n, 0, 0);
    check_fill(s.p[i].data, (size_t)tensor_numel(&s.p[i]), 100 + i, k ? 0.5f : 1.f);
    if (!k && strstr(par_tplayer_param_name(i), "ln_") && strstr(par_tplayer_param_name(i), ".w"))
      for (int64_t e = 0; e < n; e++) ((float *)s.p[i].data)[e] += 1.f; /* gains about 1 */
    CHECK(par_tplayer_set(L, i, s.p[i].data) == STRATA_OK, "set %d", i);
  }
  float *X = malloc(sizeof(float) * R * C), *DY = malloc(sizeof(float) * R * C);
  check_fill(X, R * C, 11, 2.f), check_fill(DY, R * C, 13, 1.f);
  serial(tc, &s, X, DY);

  int64_t rows, cols, r0, c0;
  par_tplayer_block(L, &rows, &cols, &r0, &c0);
  tensor_t x = mk(tc, 2, rows, cols, 0), y = mk(tc, 2, rows, cols, 0), dy = mk(tc, 2, rows, cols, 0),
           dx = mk(tc, 2, rows, cols, 0);
  float *want = malloc(sizeof(float) * rows * cols);
  cut(x.data, X, rows, cols, r0, c0), cut(dy.data, DY, rows, cols, r0, c0);
  par_tplayer_traffic_reset(L);
  int rc = par_tplayer_forward(L, &y, &x);
  rc = rc || par_tplayer_backward(L, &dx, &dy);
  CHECK(rc == 0, "forward/backward: %s", par_tplayer_error(L));
  uint64_t sent;
  par_tplayer_traffic(L, &sent, NULL);
  double formula = par_plan_tp_layer_sent(mode, ranks, depth, R, C, 4);
  CHECK(fabs((double)sent - formula) < 0.5, "sent %llu bytes for one layer, the formula %.1f", (unsigned long long)sent,
        formula);
  CHECK(par_tplayer_partners(L) == partners_of(mode, ranks, depth), "partners %d, the mode's %d",
        par_tplayer_partners(L), partners_of(mode, ranks, depth));
  cut(want, s.y.data, rows, cols, r0, c0);
  near("y", y.data, want, rows * cols, 1);
  cut(want, s.dx.data, rows, cols, r0, c0);
  near("dx", dx.data, want, rows * cols, 1);
  for (int pass = 1; pass <= 2; pass++) {
    if (pass == 2) { /* the gradients accumulate */
      CHECK(par_tplayer_forward(L, &y, &x) == 0 && par_tplayer_backward(L, &dx, &dy) == 0, "second step");
    }
    for (int i = 0; i < par_tplayer_nparams(); i++) {
      int64_t n = tensor_numel(&s.dp[i]);
      float *g = malloc(sizeof(float) * n);
      char nm[64];
      snprintf(nm, sizeof nm, "d%s (pass %d)", par_tplayer_param_name(i), pass);
      CHECK(par_tplayer_get(L, i, 1, g) == STRATA_OK, "get %s", nm);
      near(nm, g, s.dp[i].data, n, pass);
      free(g);
    }
  }
  free(X), free(DY), free(want);
  par_tplayer_destroy(L);
}

int main(int argc, char **argv) {
  comm_t *world;
  tensor_ctx_t *tc;
  check_start("tplayer_equiv", &world, &tc);
  par_tp_mode_t mode = parse_mode(argc > 1 ? argv[1] : "1d");
  int depth = argc > 2 ? atoi(argv[2]) : 1;
  run(world, tc, mode, depth);
  /* shapes the mode cannot cut, refused by name */
  par_tplayer_config_t bad = {.mode = mode, .depth = depth, .batch = B, .seq = T, .hidden = C, .heads = NH};
  char err[512];
  par_tplayer_t *L = NULL;
  if (ranks > 1) {
    bad.heads = ranks * 2 + 1, bad.hidden = C;
    CHECK(par_tplayer_create(&L, world, tc, &bad, err, sizeof err) == STRATA_EINVAL && strstr(err, "heads"),
          "odd heads accepted: %s", err);
    bad.heads = NH, bad.batch = mode == PAR_TP_1D ? 0 : 1;
    CHECK(par_tplayer_create(&L, world, tc, &bad, err, sizeof err) == STRATA_EINVAL && strstr(err, "batch"),
          "batch %lld accepted: %s", (long long)bad.batch, err);
  }
  bad = (par_tplayer_config_t){.mode = PAR_TP_3D, .batch = B, .seq = T, .hidden = C, .heads = NH};
  if (ranks == 4) /* not a cube */
    CHECK(par_tplayer_create(&L, world, tc, &bad, err, sizeof err) == STRATA_EINVAL && strstr(err, "cube"),
          "3D over 4 ranks accepted: %s", err);
  return check_finish(world, tc);
}
