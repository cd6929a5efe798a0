/* The cuDNN attention graphs (libtensor/src/sdpa_graph.h), checked without a
 * GPU: the layout of Q, K, V, O, the statistics and the gradients in strata's
 * buffers; the graph's well-formedness (every operand defined before use,
 * matmul and broadcast shapes); its meaning, by running it through a small
 * f32 interpreter of the four operation kinds and comparing with libtensor's
 * CPU attention forward and backward; and, where libcudnn.so.9 loads,
 * cuDNN's own validation of every tensor and operation descriptor. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <strata/tensor.h>
#include <string.h>

#include "sdpa_graph.h"
#if defined(STRATA_CUDA)
#include "tensor_cuda.h"
#endif

static int64_t extent(const sdpa_tensor_t *t) { /* 1 + the largest element offset */
  int64_t e = 1;
  for (int d = 0; d < 4; d++)
    e += (t->dim[d] - 1) * t->stride[d];
  return e;
}

/* Q, K, V of the forward graph tile the qkv buffer [B, T, 3C] exactly once. */
Test(sdpa, forward_layout) {
  int B = 2, T = 100, NH = 4, hs = 64, C = NH * hs;
  sdpa_graph_t g;
  cr_assert_eq(sdpa_graph_build(&g, 0, B, T, NH, hs), 0);
  const sdpa_tensor_t *q = sdpa_graph_tensor(&g, SDPA_UID_Q),
                      *kt = sdpa_graph_tensor(&g, SDPA_UID_K);
  const sdpa_tensor_t *v = sdpa_graph_tensor(&g, SDPA_UID_V),
                      *o = sdpa_graph_tensor(&g, SDPA_UID_O);
  const sdpa_tensor_t *st = sdpa_graph_tensor(&g, SDPA_UID_STATS);
  cr_assert(q && kt && v && o && st);
  int64_t qd[4] = {B, NH, T, hs}, qs[4] = {(int64_t)T * 3 * C, hs, 3 * C, 1};
  for (int d = 0; d < 4; d++) {
    cr_expect_eq(q->dim[d], qd[d]);
    cr_expect_eq(q->stride[d], qs[d]);
    cr_expect_eq(v->dim[d], qd[d]);
    cr_expect_eq(v->stride[d], qs[d]);
  }
  /* K^T: K's view with the last two dims swapped */
  cr_expect(kt->dim[2] == hs && kt->dim[3] == T && kt->stride[2] == 1 && kt->stride[3] == 3 * C);
  cr_expect_eq(g.k_offset, C);
  cr_expect_eq(g.v_offset, 2 * C);
  cr_expect(q->dtype == SDPA_BF16 && kt->dtype == SDPA_BF16 && v->dtype == SDPA_BF16 &&
            o->dtype == SDPA_BF16);
  /* O is [B, T, NH, hs]; the statistics are strata's lse [B, NH, T], f32 */
  int64_t od[4] = {B, NH, T, hs}, os[4] = {(int64_t)T * C, hs, C, 1};
  int64_t sd[4] = {B, NH, T, 1}, ss[4] = {(int64_t)NH * T, T, 1, 1};
  for (int d = 0; d < 4; d++) {
    cr_expect_eq(o->dim[d], od[d]);
    cr_expect_eq(o->stride[d], os[d]);
    cr_expect_eq(st->dim[d], sd[d]);
    if (sd[d] > 1) cr_expect_eq(st->stride[d], ss[d]);
  }
  cr_expect(st->dtype == SDPA_F32);
  cr_expect_eq(extent(o), (int64_t)B * T * C);
  cr_expect_eq(extent(st), (int64_t)B * NH * T);
  /* every element of qkv belongs to exactly one of Q, K, V */
  int64_t n = (int64_t)B * T * 3 * C;
  unsigned char *hit = calloc((size_t)n, 1);
  const sdpa_tensor_t *views[3] = {q, kt, v};
  int64_t base[3] = {0, g.k_offset, g.v_offset};
  for (int w = 0; w < 3; w++) {
    const sdpa_tensor_t *t = views[w];
    for (int64_t a = 0; a < t->dim[0]; a++)
      for (int64_t b = 0; b < t->dim[1]; b++)
        for (int64_t c = 0; c < t->dim[2]; c++)
          for (int64_t d = 0; d < t->dim[3]; d++) {
            int64_t at =
                base[w] + a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
            cr_assert(at >= 0 && at < n, "%s element out of qkv", t->name);
            hit[at]++;
          }
  }
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    bad += hit[i] != 1;
  cr_expect_eq(bad, 0, "%lld qkv elements not covered exactly once", (long long)bad);
  free(hit);
  const sdpa_tensor_t *sc = sdpa_graph_tensor(&g, SDPA_UID_SCALE);
  cr_assert(sc && sc->by_value);
  cr_expect_float_eq(sc->value, 0.125f, 0.f);
}

/* The backward writes dQ, dK, dV with the strides of Q, K, V (into a dqkv
 * laid out as qkv) and binds exactly the tensors strata passes. */
Test(sdpa, backward_layout) {
  int B = 3, T = 128, NH = 2, hs = 32, C = NH * hs;
  sdpa_graph_t g;
  cr_assert_eq(sdpa_graph_build(&g, 1, B, T, NH, hs), 0);
  const sdpa_tensor_t *q = sdpa_graph_tensor(&g, SDPA_UID_Q);
  int64_t ids[3] = {SDPA_UID_DQ, SDPA_UID_DK, SDPA_UID_DV};
  for (int i = 0; i < 3; i++) {
    const sdpa_tensor_t *t = sdpa_graph_tensor(&g, ids[i]);
    cr_assert(t);
    cr_expect(t->dtype == SDPA_BF16 && !t->is_virtual);
    for (int d = 0; d < 4; d++) {
      cr_expect_eq(t->dim[d], q->dim[d], "%s dim %d", t->name, d);
      cr_expect_eq(t->stride[d], q->stride[d], "%s stride %d", t->name, d);
    }
  }
  const sdpa_tensor_t *vt = sdpa_graph_tensor(&g, SDPA_UID_V);
  cr_expect(vt->dim[2] == hs && vt->dim[3] == T && vt->stride[2] == 1 && vt->stride[3] == 3 * C);
  cr_expect_eq(g.dq_accum_bytes, (int64_t)B * NH * T * hs * 4);
  cr_expect_eq(g.dsum_bytes, (int64_t)B * NH * T * 4);
  int want[14] = {SDPA_UID_Q,   SDPA_UID_K,   SDPA_UID_V,        SDPA_UID_O,   SDPA_UID_STATS,
                  SDPA_UID_DO,  SDPA_UID_DQ,  SDPA_UID_DK,       SDPA_UID_DV,  SDPA_UID_SCALE,
                  SDPA_UID_NEG, SDPA_UID_ONE, SDPA_UID_DQ_ACCUM, SDPA_UID_DSUM};
  int bound = 0;
  for (int i = 0; i < g.ntensors; i++)
    if (!g.t[i].is_virtual) {
      int found = 0;
      for (int k = 0; k < 14; k++)
        found |= g.t[i].uid == want[k];
      cr_expect(found, "unexpected bound tensor %s", g.t[i].name);
      bound++;
    }
  cr_expect_eq(bound, 14);
}

/* Operands defined before use, outputs written once, shapes that agree. */
static void check_well_formed(const sdpa_graph_t *g) {
  int defined[SDPA_MAX_TENSORS] = {0};
  for (int i = 0; i < g->ntensors; i++) {
    int64_t u = g->t[i].uid;
    int output = g->backward ? (u >= SDPA_UID_DQ && u <= SDPA_UID_DV) || u == SDPA_UID_DQ_ACCUM ||
                                   u == SDPA_UID_DSUM
                             : u == SDPA_UID_O || u == SDPA_UID_STATS;
    defined[i] = !g->t[i].is_virtual && !output; /* bound inputs and by-value scalars */
  }
  for (int k = 0; k < g->nops; k++) {
    const sdpa_op_t *o = &g->op[k];
    const sdpa_tensor_t *x = &g->t[o->x], *y = &g->t[o->y];
    cr_assert(defined[o->x], "%s reads %s before it is written", o->name, x->name);
    if (o->b >= 0)
      cr_assert(defined[o->b], "%s reads %s before it is written", o->name, g->t[o->b].name);
    if (o->t >= 0)
      cr_assert(defined[o->t], "%s reads %s before it is written", o->name, g->t[o->t].name);
    cr_assert(!defined[o->y], "%s writes %s a second time", o->name, y->name);
    defined[o->y] = 1;
    if (o->kind == SDPA_MATMUL) {
      const sdpa_tensor_t *b = &g->t[o->b];
      cr_expect(x->dim[0] == y->dim[0] && b->dim[0] == y->dim[0] && x->dim[1] == y->dim[1] &&
                    b->dim[1] == y->dim[1] && x->dim[2] == y->dim[2] && x->dim[3] == b->dim[2] &&
                    b->dim[3] == y->dim[3],
                "%s: shapes do not multiply", o->name);
    } else if (o->kind == SDPA_POINTWISE) {
      int in[3] = {o->x, o->b, o->t};
      for (int j = 0; j < 3; j++)
        for (int d = 0; j < 3 && in[j] >= 0 && d < 4; d++)
          cr_expect(g->t[in[j]].dim[d] == y->dim[d] || g->t[in[j]].dim[d] == 1,
                    "%s: %s does not broadcast", o->name, g->t[in[j]].name);
    } else if (o->kind == SDPA_REDUCE) {
      for (int d = 0; d < 4; d++)
        cr_expect(y->dim[d] == x->dim[d] || y->dim[d] == 1, "%s: bad reduction", o->name);
    } else {
      int64_t nx = 1, ny = 1;
      for (int d = 0; d < 4; d++)
        nx *= x->dim[d], ny *= y->dim[d];
      cr_expect_eq(nx, ny, "%s: reshape changes the element count", o->name);
    }
  }
  for (int i = 0; i < g->ntensors; i++)
    cr_expect(defined[i], "%s is never written", g->t[i].name);
}

Test(sdpa, well_formed) {
  sdpa_graph_t g;
  for (int bw = 0; bw < 2; bw++) {
    cr_assert_eq(sdpa_graph_build(&g, bw, 2, 100, 4, 64), 0);
    check_well_formed(&g);
  }
  cr_expect_eq(sdpa_graph_build(&g, 0, 0, 64, 4, 64), -1);
}

/* ---- a small f32 interpreter of the graphs ---- */

typedef struct {
  float *buf[SDPA_MAX_TENSORS];
  int owned[SDPA_MAX_TENSORS];
} interp_t;

static float *at(const sdpa_tensor_t *t, float *buf, const int64_t i[4]) {
  int64_t off = 0;
  for (int d = 0; d < 4; d++)
    off += (t->dim[d] == 1 ? 0 : i[d]) * t->stride[d];
  return buf + off;
}

static float pw_apply(int mode, float x, float b, float t, int64_t idx) {
  switch (mode) {
  case SDPA_PW_ADD: return x + b;
  case SDPA_PW_SUB: return x - b;
  case SDPA_PW_MUL: return x * b;
  case SDPA_PW_DIV: return x / b;
  case SDPA_PW_EXP: return expf(x);
  case SDPA_PW_LOG: return logf(x);
  case SDPA_PW_IDENTITY: return x;
  case SDPA_PW_GEN_INDEX: return (float)idx;
  case SDPA_PW_CMP_GE: return x >= b ? 1.f : 0.f;
  case SDPA_PW_SELECT: return t != 0.f ? x : b;
  }
  return NAN;
}

/* Runs g; bound[i] are the buffers of the non-virtual tensors (by uid). */
static void run(const sdpa_graph_t *g, float *const *bound_by_uid) {
  interp_t it = {0};
  for (int i = 0; i < g->ntensors; i++) {
    const sdpa_tensor_t *t = &g->t[i];
    if (t->by_value) {
      it.buf[i] = malloc(sizeof(float));
      it.buf[i][0] = t->value;
      it.owned[i] = 1;
    } else if (!t->is_virtual) {
      it.buf[i] = bound_by_uid[t->uid];
    }
  }
  for (int k = 0; k < g->nops; k++) {
    const sdpa_op_t *o = &g->op[k];
    const sdpa_tensor_t *x = &g->t[o->x], *y = &g->t[o->y];
    if (!it.buf[o->y]) {
      if (o->kind == SDPA_RESHAPE) {
        it.buf[o->y] = it.buf[o->x]; /* the same memory seen with y's dims and strides */
        continue;
      }
      it.buf[o->y] = calloc((size_t)extent(y), sizeof(float));
      it.owned[o->y] = 1;
    }
    float *yb = it.buf[o->y], *xb = it.buf[o->x];
    int64_t i[4];
    if (o->kind == SDPA_REDUCE) {
      for (i[0] = 0; i[0] < y->dim[0]; i[0]++)
        for (i[1] = 0; i[1] < y->dim[1]; i[1]++)
          for (i[2] = 0; i[2] < y->dim[2]; i[2]++)
            for (i[3] = 0; i[3] < y->dim[3]; i[3]++)
              *at(y, yb, i) = o->mode == SDPA_RED_MAX ? -INFINITY : 0.f;
      for (i[0] = 0; i[0] < x->dim[0]; i[0]++)
        for (i[1] = 0; i[1] < x->dim[1]; i[1]++)
          for (i[2] = 0; i[2] < x->dim[2]; i[2]++)
            for (i[3] = 0; i[3] < x->dim[3]; i[3]++) {
              float *r = at(y, yb, i), v = *at(x, xb, i);
              *r = o->mode == SDPA_RED_MAX ? fmaxf(*r, v) : *r + v;
            }
      continue;
    }
    for (i[0] = 0; i[0] < y->dim[0]; i[0]++)
      for (i[1] = 0; i[1] < y->dim[1]; i[1]++)
        for (i[2] = 0; i[2] < y->dim[2]; i[2]++)
          for (i[3] = 0; i[3] < y->dim[3]; i[3]++) {
            if (o->kind == SDPA_MATMUL) {
              const sdpa_tensor_t *b = &g->t[o->b];
              double acc = 0;
              for (int64_t kk = 0; kk < x->dim[3]; kk++) {
                int64_t ia[4] = {i[0], i[1], i[2], kk}, ib[4] = {i[0], i[1], kk, i[3]};
                acc += (double)*at(x, xb, ia) * *at(b, it.buf[o->b], ib);
              }
              *at(y, yb, i) = (float)acc;
            } else {
              float bv = o->b >= 0 ? *at(&g->t[o->b], it.buf[o->b], i) : 0.f;
              float tv = o->t >= 0 ? *at(&g->t[o->t], it.buf[o->t], i) : 0.f;
              *at(y, yb, i) = pw_apply(o->mode, *at(x, xb, i), bv, tv, i[o->axis]);
            }
          }
  }
  for (int i = 0; i < g->ntensors; i++)
    if (it.owned[i]) free(it.buf[i]);
}

static void fill(float *x, int64_t n, unsigned seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)(seed >> 8) / 8388608.f - 1.f;
  }
}

static double max_diff(const float *a, const float *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++)
    m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}

/* The graphs compute what strata's attention computes: O and lse forward,
 * dQ, dK, dV backward (f32 interpretation, so only summation order differs). */
Test(sdpa, graph_means_causal_attention) {
  int B = 2, T = 7, NH = 3, hs = 4, C = NH * hs;
  int64_t nq = (int64_t)B * T * 3 * C, no = (int64_t)B * T * C, nl = (int64_t)B * NH * T;
  tensor_ctx_t *ctx;
  cr_assert_eq(tensor_ctx_create(&ctx, NULL), 0);
  float *qkv = malloc(nq * 4), *out = malloc(no * 4), *lse = malloc(nl * 4), *dout = malloc(no * 4);
  float *dqkv = calloc(nq, 4), *gout = malloc(no * 4), *glse = malloc(nl * 4),
        *gdqkv = calloc(nq, 4);
  float *dacc = malloc((size_t)B * NH * T * hs * 4), *dsum = malloc(nl * 4);
  fill(qkv, nq, 1), fill(dout, no, 2);
  int64_t sq[3] = {B, T, 3 * C}, so[3] = {B, T, C}, sl[3] = {B, NH, T};
  tensor_t tq = tensor_view(qkv, TENSOR_F32, TENSOR_CPU, 3, sq),
           to = tensor_view(out, TENSOR_F32, TENSOR_CPU, 3, so);
  tensor_t tl = tensor_view(lse, TENSOR_F32, TENSOR_CPU, 3, sl),
           tdo = tensor_view(dout, TENSOR_F32, TENSOR_CPU, 3, so);
  tensor_t tdq = tensor_view(dqkv, TENSOR_F32, TENSOR_CPU, 3, sq);
  cr_assert_eq(tensor_attention_forward(ctx, &to, &tl, &tq, NH), 0);
  cr_assert_eq(tensor_attention_backward(ctx, &tdq, &tdo, &tq, &to, &tl, NH), 0);

  sdpa_graph_t g;
  float *bind[SDPA_UID_VIRTUAL] = {0};
  bind[SDPA_UID_Q] = qkv, bind[SDPA_UID_K] = qkv + C, bind[SDPA_UID_V] = qkv + 2 * C;
  bind[SDPA_UID_O] = gout, bind[SDPA_UID_STATS] = glse;
  cr_assert_eq(sdpa_graph_build(&g, 0, B, T, NH, hs), 0);
  run(&g, bind);
  cr_expect(max_diff(gout, out, no) < 1e-5, "O differs by %g", max_diff(gout, out, no));
  cr_expect(max_diff(glse, lse, nl) < 1e-5, "stats differ from lse by %g", max_diff(glse, lse, nl));

  bind[SDPA_UID_O] = out, bind[SDPA_UID_STATS] = lse, bind[SDPA_UID_DO] = dout;
  bind[SDPA_UID_DQ] = gdqkv, bind[SDPA_UID_DK] = gdqkv + C, bind[SDPA_UID_DV] = gdqkv + 2 * C;
  bind[SDPA_UID_DQ_ACCUM] = dacc, bind[SDPA_UID_DSUM] = dsum;
  cr_assert_eq(sdpa_graph_build(&g, 1, B, T, NH, hs), 0);
  run(&g, bind);
  cr_expect(max_diff(gdqkv, dqkv, nq) < 1e-5, "dQ, dK, dV differ by %g", max_diff(gdqkv, dqkv, nq));
  free(qkv), free(out), free(lse), free(dout), free(dqkv), free(gout), free(glse), free(gdqkv),
      free(dacc);
  free(dsum);
  tensor_ctx_destroy(ctx);
}

/* cuDNN itself accepts every tensor and operation descriptor of the graphs
 * (it checks dims, strides, types and matmul shapes when they are finalized;
 * only the engine choice needs a GPU). */
Test(sdpa, cudnn_accepts_descriptors) {
#if defined(STRATA_CUDA)
  int shapes[4][4] = {{2, 64, 4, 64}, {2, 100, 4, 64}, {8, 1024, 12, 64}, {1, 17, 3, 8}};
  for (int s = 0; s < 4; s++)
    for (int bw = 0; bw < 2; bw++) {
      char msg[512] = "";
      int rc = tcu_sdpa_check_ops(bw, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], msg,
                                  sizeof msg);
      if (rc == 1) cr_skip_test("libcudnn.so.9 not found");
      cr_expect_eq(rc, 0, "%s B%d T%d NH%d hs%d: %s", bw ? "backward" : "forward", shapes[s][0],
                   shapes[s][1], shapes[s][2], shapes[s][3], msg);
    }
#else
  cr_skip_test("built without CUDA");
#endif
}
