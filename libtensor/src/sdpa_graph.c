/* cuDNN's flash attention graphs as data (see sdpa_graph.h). The operations
 * are the ones cuDNN's fused attention engines recognise, as NVIDIA's
 * cudnn-frontend lowers its sdpa and sdpa_backward nodes for cuDNN 9:
 *
 * forward   S = Q K^T * scale; causal: S = row >= col ? S : lowest;
 *           m = rowmax S; e = exp(S - m); l = rowsum e;
 *           stats = m + log l; O = (e / l) V          (P in bf16 for the GEMM)
 * backward  D = rowsum(dO * O) (kept f32 in workspace);
 *           P = exp(causal(Q K^T * scale - stats));
 *           dV = P^T dO; dS = P (dO V^T - D) * scale;
 *           dK = dS^T Q; dQ = dS K (accumulated f32 in workspace, then bf16)
 *
 * which is FlashAttention-2's algorithm (Dao 2023, algorithms 1 and 2). The
 * statistics are max + natural log of the sum, the max included: exactly the
 * log-sum-exp strata's kernels save, so either backward can follow either
 * forward. Intermediate tensors are virtual (never materialised) and f32
 * unless noted; the GEMM operands that cuDNN takes as bf16 are marked so. */
#include "sdpa_graph.h"

#include <float.h>
#include <math.h>
#include <stddef.h>

static int add(sdpa_graph_t *g, int64_t uid, sdpa_dtype_t dt, const int64_t dim[4],
               const int64_t stride[4], int is_virtual, const char *name) {
  if (g->ntensors >= SDPA_MAX_TENSORS) return -1;
  int i = g->ntensors++;
  sdpa_tensor_t *t = &g->t[i];
  t->uid = uid ? uid : SDPA_UID_VIRTUAL + i;
  t->dtype = dt;
  for (int d = 0; d < 4; d++)
    t->dim[d] = dim[d], t->stride[d] = stride[d];
  t->is_virtual = is_virtual;
  t->by_value = 0;
  t->value = 0.f;
  t->name = name;
  return i;
}

/* A virtual tensor with packed (row-major) strides. */
static int virt(sdpa_graph_t *g, sdpa_dtype_t dt, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                const char *name) {
  int64_t dim[4] = {d0, d1, d2, d3}, st[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
  return add(g, 0, dt, dim, st, 1, name);
}

/* A packed non-virtual f32 tensor (bound by the caller). */
static int packed(sdpa_graph_t *g, int64_t uid, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                  const char *name) {
  int i = virt(g, SDPA_F32, d0, d1, d2, d3, name);
  if (i >= 0) g->t[i].uid = uid, g->t[i].is_virtual = 0;
  return i;
}

static int scalar(sdpa_graph_t *g, int64_t uid, float value, const char *name) {
  int64_t one[4] = {1, 1, 1, 1};
  int i = add(g, uid, SDPA_F32, one, one, 0, name);
  if (i >= 0) g->t[i].by_value = 1, g->t[i].value = value;
  return i;
}

static int op(sdpa_graph_t *g, sdpa_opkind_t kind, int mode, sdpa_dtype_t compute, int x, int b,
              int t, int y, const char *name) {
  if (g->nops >= SDPA_MAX_OPS || x < 0 || y < 0) return -1;
  sdpa_op_t *o = &g->op[g->nops++];
  o->kind = kind, o->mode = mode, o->axis = 0, o->compute = compute;
  o->x = x, o->b = b, o->t = t, o->y = y, o->name = name;
  return y;
}

static int pw(sdpa_graph_t *g, sdpa_pw_t mode, int x, int b, int y, const char *name) {
  return op(g, SDPA_POINTWISE, mode, SDPA_F32, x, b, -1, y, name);
}

/* s >= 0: scores [B, NH, T, T]; returns causal(s): row >= col keeps s, the
 * rest becomes the lowest float (exp of it minus anything finite is 0). */
static int causal(sdpa_graph_t *g, int s, int neg) {
  int B = g->B, NH = g->NH, T = g->T;
  int row = virt(g, SDPA_I32, B, NH, T, T, "row_index");
  int col = virt(g, SDPA_I32, B, NH, T, T, "col_index");
  int keep = virt(g, SDPA_BOOL, B, NH, T, T, "row_ge_col");
  int out = virt(g, SDPA_F32, B, NH, T, T, "causal_scores");
  if (op(g, SDPA_POINTWISE, SDPA_PW_GEN_INDEX, SDPA_I32, s, -1, -1, row, "gen_row_index") < 0 ||
      op(g, SDPA_POINTWISE, SDPA_PW_GEN_INDEX, SDPA_I32, s, -1, -1, col, "gen_col_index") < 0)
    return -1;
  g->op[g->nops - 2].axis = 2;
  g->op[g->nops - 1].axis = 3;
  if (op(g, SDPA_POINTWISE, SDPA_PW_CMP_GE, SDPA_BOOL, row, col, -1, keep, "row_ge_col") < 0)
    return -1;
  return op(g, SDPA_POINTWISE, SDPA_PW_SELECT, SDPA_F32, s, neg, keep, out, "causal_select");
}

static int forward(sdpa_graph_t *g, int q, int kt, int v, int scale, int neg) {
  int B = g->B, NH = g->NH, T = g->T, hs = g->hs;
  int64_t C = (int64_t)NH * hs;
  int64_t od[4] = {B, NH, T, hs}, os[4] = {(int64_t)T * C, hs, C, 1};
  int64_t sd[4] = {B, NH, T, 1}, ss[4] = {(int64_t)NH * T, T, 1, 1};
  int o = add(g, SDPA_UID_O, SDPA_BF16, od, os, 0, "O");
  int stats = add(g, SDPA_UID_STATS, SDPA_F32, sd, ss, 0, "stats");
  int s = virt(g, SDPA_F32, B, NH, T, T, "S");
  int s1 = virt(g, SDPA_F32, B, NH, T, T, "S_scaled");
  if (op(g, SDPA_MATMUL, 0, SDPA_F32, q, kt, -1, s, "matmul_Q_KT") < 0 ||
      pw(g, SDPA_PW_MUL, s, scale, s1, "attn_scale") < 0)
    return -1;
  int s2 = causal(g, s1, neg);
  int m = virt(g, SDPA_F32, B, NH, T, 1, "row_max");
  int sub = virt(g, SDPA_F32, B, NH, T, T, "S_minus_max");
  int e = virt(g, SDPA_F32, B, NH, T, T, "exp");
  int l = virt(g, SDPA_F32, B, NH, T, 1, "row_sum");
  int logl = virt(g, SDPA_F32, B, NH, T, 1, "log_row_sum");
  int p = virt(g, SDPA_BF16, B, NH, T, T, "P"); /* the second GEMM reads P in the inputs' type */
  if (s2 < 0 || op(g, SDPA_REDUCE, SDPA_RED_MAX, SDPA_F32, s2, -1, -1, m, "max") < 0 ||
      pw(g, SDPA_PW_SUB, s2, m, sub, "sub_max") < 0 || pw(g, SDPA_PW_EXP, sub, -1, e, "exp") < 0 ||
      op(g, SDPA_REDUCE, SDPA_RED_ADD, SDPA_F32, e, -1, -1, l, "sum") < 0 ||
      pw(g, SDPA_PW_LOG, l, -1, logl, "log") < 0 ||
      pw(g, SDPA_PW_ADD, m, logl, stats, "stats") < 0 || pw(g, SDPA_PW_DIV, e, l, p, "softmax") < 0)
    return -1;
  return op(g, SDPA_MATMUL, 0, SDPA_F32, p, v, -1, o, "matmul_P_V");
}

static int backward(sdpa_graph_t *g, int q, int kt, int vt, int scale, int neg) {
  int B = g->B, NH = g->NH, T = g->T, hs = g->hs;
  int64_t C = (int64_t)NH * hs, C3 = 3 * C;
  int64_t od[4] = {B, NH, T, hs}, os[4] = {(int64_t)T * C, hs, C, 1};
  int64_t qs[4] = {(int64_t)T * C3, hs, C3, 1};
  int64_t sd[4] = {B, NH, T, 1}, ss[4] = {(int64_t)NH * T, T, 1, 1};
  int64_t pd[4] = {B, NH, T, T}, pts[4] = {(int64_t)NH * T * T, (int64_t)T * T, 1, T};
  int o = add(g, SDPA_UID_O, SDPA_BF16, od, os, 0, "O");
  int dout = add(g, SDPA_UID_DO, SDPA_BF16, od, os, 0, "dO");
  int stats = add(g, SDPA_UID_STATS, SDPA_F32, sd, ss, 0, "stats");
  int dq = add(g, SDPA_UID_DQ, SDPA_BF16, od, qs, 0, "dQ");
  int dk = add(g, SDPA_UID_DK, SDPA_BF16, od, qs, 0, "dK");
  int dv = add(g, SDPA_UID_DV, SDPA_BF16, od, qs, 0, "dV");
  int one = scalar(g, SDPA_UID_ONE, 1.f, "one");
  int dacc = packed(g, SDPA_UID_DQ_ACCUM, B, NH, T, hs, "dQ_accum");
  int dsum = packed(g, SDPA_UID_DSUM, B, NH, T, 1, "sum_dO_O");
  /* D = rowsum(dO * O) */
  int doo = virt(g, SDPA_F32, B, NH, T, hs, "dO_O");
  int dred = virt(g, SDPA_F32, B, NH, T, 1, "rowsum_dO_O");
  if (pw(g, SDPA_PW_MUL, dout, o, doo, "mul_dO_O") < 0 ||
      op(g, SDPA_REDUCE, SDPA_RED_ADD, SDPA_F32, doo, -1, -1, dred, "reduce_dO_O") < 0 ||
      pw(g, SDPA_PW_MUL, dred, one, dsum, "keep_sum_dO_O") < 0)
    return -1;
  /* P = exp(causal(Q K^T * scale - stats)) */
  int s = virt(g, SDPA_F32, B, NH, T, T, "S");
  int s1 = virt(g, SDPA_F32, B, NH, T, T, "S_scaled");
  int s2 = virt(g, SDPA_F32, B, NH, T, T, "S_minus_stats");
  if (op(g, SDPA_MATMUL, 0, SDPA_F32, q, kt, -1, s, "matmul_Q_KT") < 0 ||
      pw(g, SDPA_PW_MUL, s, scale, s1, "attn_scale") < 0 ||
      pw(g, SDPA_PW_SUB, s1, stats, s2, "sub_stats") < 0)
    return -1;
  int s3 = causal(g, s2, neg);
  int p = virt(g, SDPA_F32, B, NH, T, T, "P");
  if (s3 < 0 || pw(g, SDPA_PW_EXP, s3, -1, p, "exp") < 0) return -1;
  /* dV = P^T dO */
  int pt = add(g, 0, SDPA_BF16, pd, pts, 1, "P_T");
  if (op(g, SDPA_RESHAPE, 0, SDPA_F32, p, -1, -1, pt, "reshape_P") < 0 ||
      op(g, SDPA_MATMUL, 0, SDPA_F32, pt, dout, -1, dv, "matmul_PT_dO") < 0)
    return -1;
  /* dS = P (dO V^T - D) * scale */
  int dp = virt(g, SDPA_F32, B, NH, T, T, "dP");
  int dp1 = virt(g, SDPA_F32, B, NH, T, T, "dP_minus_D");
  int ds0 = virt(g, SDPA_F32, B, NH, T, T, "dS_unscaled");
  int ds = virt(g, SDPA_F32, B, NH, T, T, "dS");
  if (op(g, SDPA_MATMUL, 0, SDPA_F32, dout, vt, -1, dp, "matmul_dO_VT") < 0 ||
      pw(g, SDPA_PW_SUB, dp, dsum, dp1, "sub_D") < 0 ||
      pw(g, SDPA_PW_MUL, dp1, p, ds0, "mul_P") < 0 ||
      pw(g, SDPA_PW_MUL, ds0, scale, ds, "dS_scale") < 0)
    return -1;
  /* dK = dS^T Q */
  int dst = add(g, 0, SDPA_BF16, pd, pts, 1, "dS_T");
  if (op(g, SDPA_RESHAPE, 0, SDPA_F32, ds, -1, -1, dst, "reshape_dS") < 0 ||
      op(g, SDPA_MATMUL, 0, SDPA_F32, dst, q, -1, dk, "matmul_dST_Q") < 0)
    return -1;
  /* dQ = dS K, K seen again untransposed */
  int k = add(g, 0, SDPA_F32, od, qs, 1, "K");
  if (op(g, SDPA_RESHAPE, 0, SDPA_F32, kt, -1, -1, k, "reshape_K") < 0 ||
      op(g, SDPA_MATMUL, 0, SDPA_F32, ds, k, -1, dacc, "matmul_dS_K") < 0)
    return -1;
  g->dq_accum_bytes = (int64_t)B * NH * T * hs * 4;
  g->dsum_bytes = (int64_t)B * NH * T * 4;
  return pw(g, SDPA_PW_IDENTITY, dacc, -1, dq, "dQ_from_accum");
}

int sdpa_graph_build(sdpa_graph_t *g, int backward_pass, int B, int T, int NH, int hs) {
  if (B <= 0 || T <= 0 || NH <= 0 || hs <= 0) return -1;
  *g = (sdpa_graph_t){.backward = backward_pass, .B = B, .T = T, .NH = NH, .hs = hs};
  int64_t C = (int64_t)NH * hs, C3 = 3 * C;
  g->k_offset = C, g->v_offset = 2 * C;
  /* Q, K, V in [B, T, 3, NH, hs]: head stride hs, row stride 3C. The GEMMs
   * take K (and V in the backward) transposed, which is only a swap of the
   * last two strides. */
  int64_t qd[4] = {B, NH, T, hs}, qs[4] = {T * C3, hs, C3, 1};
  int64_t td[4] = {B, NH, hs, T}, ts[4] = {T * C3, hs, 1, C3};
  int q = add(g, SDPA_UID_Q, SDPA_BF16, qd, qs, 0, "Q");
  int kt = add(g, SDPA_UID_K, SDPA_BF16, td, ts, 0, "K_T");
  int v = backward_pass ? add(g, SDPA_UID_V, SDPA_BF16, td, ts, 0, "V_T")
                        : add(g, SDPA_UID_V, SDPA_BF16, qd, qs, 0, "V");
  int scale = scalar(g, SDPA_UID_SCALE, 1.f / sqrtf((float)hs), "attn_scale");
  int neg = scalar(g, SDPA_UID_NEG, -FLT_MAX, "lowest");
  if (q < 0 || kt < 0 || v < 0 || scale < 0 || neg < 0) return -1;
  int rc = backward_pass ? backward(g, q, kt, v, scale, neg) : forward(g, q, kt, v, scale, neg);
  return rc < 0 ? -1 : 0;
}

const sdpa_tensor_t *sdpa_graph_tensor(const sdpa_graph_t *g, int64_t uid) {
  for (int i = 0; i < g->ntensors; i++)
    if (g->t[i].uid == uid) return &g->t[i];
  return NULL;
}
