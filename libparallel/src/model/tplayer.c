/* One transformer layer under 1D, 2D, 2.5D or 3D tensor parallelism
 * (strata/par_tplayer.h, and the GPT model's layouts through
 * tpl_internal.h): the products by Megatron's column/row split, by SUMMA or
 * by the 3D product; layernorm with its row statistics summed over the
 * ranks that share a row; attention on the rank's own sequences and heads;
 * the vector parameters' gradients summed over their replicas. Parameters
 * are held in par_gpt's layout (a weight N x K, output by input), so that a
 * part is a rectangle of the whole tensor; the 2D and 3D products take
 * them transposed (K x N), into a scratch block. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <strata/par_tplayer.h>

#include "tpl_internal.h"

#define LN_EPS 1e-5f /* par_gpt's */

const char *const tpl_param_names[TPL_NPARAM] = {"ln_1.w",      "ln_1.b",      "attn.qkv.w", "attn.qkv.b",
                                                 "attn.proj.w", "attn.proj.b", "ln_2.w",     "ln_2.b",
                                                 "mlp.fc.w",    "mlp.fc.b",    "mlp.proj.w", "mlp.proj.b"};
/* The products in order (qkv, proj, fc, fcproj): weight, and K, N in C. */
static const int lin_w[4] = {TPL_QKVW, TPL_PROJW, TPL_FCW, TPL_FCPW}, lin_k[4] = {1, 1, 1, 4}, lin_n[4] = {3, 1, 4, 1};

int tpl_fail(tpl_mesh_t *M, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(M->err, sizeof M->err, fmt, ap);
  va_end(ap);
  return rc;
}
static int tfail(tpl_mesh_t *M, int rc) { return tpl_fail(M, rc, "tensor-parallel layer: %s", tensor_last_error(M->tc)); }
static int cfail(tpl_mesh_t *M, int rc, comm_t *c) {
  return tpl_fail(M, rc, "tensor-parallel layer: %s", comm_last_error(c));
}

static const char *mode_name(par_tp_mode_t m) {
  return m == PAR_TP_1D ? "1D" : m == PAR_TP_2D ? "2D" : m == PAR_TP_2P5D ? "2.5D" : "3D";
}

static int is_weight(int i) { return i == TPL_QKVW || i == TPL_PROJW || i == TPL_FCW || i == TPL_FCPW; }
/* The product a weight or bias belongs to (-1 for the layernorms). */
static int lin_of(int i) {
  for (int t = 0; t < 4; t++)
    if (i == lin_w[t] || i == lin_w[t] + 1) return t;
  return -1;
}

/* The whole shape of parameter i: N (rows) and K (columns; 0 for a vector). */
static void whole_shape(int64_t C, int i, int64_t *N, int64_t *K) {
  int t = lin_of(i);
  *N = t < 0 ? C : lin_n[t] * C;
  *K = is_weight(i) ? lin_k[t] * C : 0;
}

void tpl_param_shape(const tpl_mesh_t *M, int i, int64_t *rows, int64_t *cols) {
  const tpl_geom_t *g = &M->g[i];
  if (rows) *rows = g->parts * g->nn;
  if (cols) *cols = is_weight(i) ? g->kn : 0;
}

int64_t tpl_whole_at(const tpl_geom_t *g, int64_t n, int64_t k, int64_t K) {
  int64_t part = n / g->nn, gn = part * g->np + g->n0 + n % g->nn;
  return gn * K + g->k0 + k;
}

/* ---- geometry ------------------------------------------------------------ */

/* This rank's coordinates: 1D (r, -, -), 2D/2.5D (row i, column j, layer),
 * 3D (i, j, l). */
typedef struct {
  int a, b, c;
} coords_t;

static void set_geometry(tpl_mesh_t *M, coords_t k) {
  int64_t C = M->C;
  int q = M->q;
  /* a vector over the residual stream's columns: replicated down them */
  int vowner = M->mode == PAR_TP_1D ? k.a == 0 : M->mode == PAR_TP_3D ? k.a == 0 && k.b == 0 : k.a == 0 && k.c == 0;
  M->cols = (tpl_geom_t){.k0 = 0, .kn = 1, .n0 = M->col0, .nn = M->acols, .np = C, .parts = 1, .owner = vowner};
  for (int i = 0; i < TPL_NPARAM; i++) {
    tpl_geom_t *g = &M->g[i];
    int t = lin_of(i);
    int64_t N, K;
    whole_shape(C, i, &N, &K);
    if (t < 0) { /* a layernorm's */
      *g = M->cols;
      continue;
    }
    g->parts = i == TPL_QKVW || i == TPL_QKVB ? 3 : 1;
    g->np = N / g->parts, g->owner = 1, g->pack = 0;
    int second = t & 1;
    switch (M->mode) {
    case PAR_TP_1D:
      if (!second) g->k0 = 0, g->kn = K, g->nn = g->np / q, g->n0 = k.a * g->nn;
      else g->k0 = k.a * (K / q), g->kn = K / q, g->n0 = 0, g->nn = N, g->owner = is_weight(i) || k.a == 0;
      break;
    case PAR_TP_2D:
    case PAR_TP_2P5D: /* (k.a, k.b) = (row, column), k.c the layer */
      g->k0 = k.a * (K / q), g->kn = K / q, g->nn = g->np / q, g->n0 = k.b * g->nn;
      g->owner = k.c == 0 && (is_weight(i) || k.a == 0);
      break;
    case PAR_TP_3D: { /* (i, j, l) */
      int kb = second ? k.b : k.c, nb = second ? k.c : k.b;
      g->k0 = kb * (K / q) + k.a * (K / ((int64_t)q * q)), g->kn = K / ((int64_t)q * q);
      g->nn = g->np / q, g->n0 = nb * g->nn;
      g->pack = !second; /* qkv's and fc's biases: the columns j, like their outputs */
      g->owner = is_weight(i) || (k.a == 0 && (g->pack ? k.c : k.b) == 0);
      break;
    }
    }
    if (!is_weight(i)) g->k0 = 0, g->kn = 1;
  }
}

/* ---- the mesh ------------------------------------------------------------ */

static int alloc2(tpl_mesh_t *M, tensor_t *t, int64_t r, int64_t c) {
  int64_t s[2] = {r, c};
  int rc = tensor_alloc(M->tc, t, TENSOR_F32, M->dev, c ? 2 : 1, s);
  if (!rc) rc = tensor_zero(M->tc, t);
  return rc ? tfail(M, rc) : STRATA_OK;
}

/* The ranks of the group (by their rank in M->aux) that this rank's groups reach. */
static int count_partners(tpl_mesh_t *M) {
  int n = comm_size(M->aux), me = comm_rank(M->aux), rc = STRATA_OK, count = 0;
  char *seen = calloc((size_t)n, 1);
  int *ranks = malloc(sizeof(int) * (size_t)n);
  if (!seen || !ranks) rc = tpl_fail(M, STRATA_ENOMEM, "tensor-parallel layer: no memory");
  for (int k = 0; k < M->ngroups && !rc; k++) {
    comm_t *g = M->groups[k];
    if ((rc = comm_allgather(g, ranks, &me, 1, COMM_I32))) rc = cfail(M, rc, g);
    for (int r = 0; !rc && r < comm_size(g); r++) seen[ranks[r]] = 1;
  }
  for (int r = 0; r < n; r++) count += seen[r] && r != me;
  free(seen), free(ranks);
  M->partners = count;
  for (int k = 0; k < M->ngroups; k++) comm_counters_reset(M->groups[k]);
  return rc;
}

static int check_shape(tpl_mesh_t *M, const char *what, int64_t v, int64_t by, const char *why) {
  if (v > 0 && by > 0 && v % by == 0) return STRATA_OK;
  return tpl_fail(M, STRATA_EINVAL, "%s tensor parallelism over %d ranks: %s %lld is not a positive multiple of %lld (%s)",
                  mode_name(M->mode), comm_size(M->aux), what, (long long)v, (long long)by, why);
}

static int build(tpl_mesh_t *M, comm_t *c, int64_t C, int64_t heads) {
  int rc, n = comm_size(c), me = comm_rank(c);
  coords_t k = {me, 0, 0};
  char err[256] = "";
  M->q = n, M->rowsplit = 1;
  if ((rc = comm_dup(&M->aux, c))) return cfail(M, rc, c);
  switch (M->mode) {
  case PAR_TP_1D:
    if (M->depth != 1) return tpl_fail(M, STRATA_EINVAL, "1D tensor parallelism has no depth (got %d)", M->depth);
    if ((rc = comm_dup(&M->tp, c))) return cfail(M, rc, c);
    M->groups[M->ngroups++] = M->tp;
    M->md = n;
    break;
  case PAR_TP_2D:
  case PAR_TP_2P5D:
    if (M->mode == PAR_TP_2D && M->depth != 1)
      return tpl_fail(M, STRATA_EINVAL, "2D tensor parallelism has no depth (got %d): use 2.5D", M->depth);
    if ((rc = par_summa_create(&M->summa, c, M->depth, err, sizeof err))) return tpl_fail(M, rc, "%s", err);
    par_summa_coords(M->summa, &k.a, &k.b, &M->q);
    par_summa_depth(M->summa, &k.c, NULL);
    M->hid = par_summa_row(M->summa);
    M->rep[0][0] = par_summa_col(M->summa), M->rep[0][1] = par_summa_dep(M->summa);
    M->groups[M->ngroups++] = par_summa_row(M->summa);
    M->groups[M->ngroups++] = par_summa_col(M->summa);
    if (par_summa_dep(M->summa)) M->groups[M->ngroups++] = par_summa_dep(M->summa);
    M->md = M->q, M->rowsplit = (int64_t)M->depth * M->q, M->rowblk = (int64_t)k.c * M->q + k.a;
    break;
  case PAR_TP_3D: {
    if (M->depth != 1) return tpl_fail(M, STRATA_EINVAL, "3D tensor parallelism has no depth (got %d)", M->depth);
    if ((rc = par_mm3d_create(&M->m1, c, err, sizeof err))) return tpl_fail(M, rc, "%s", err);
    par_mm3d_coords(M->m1, &k.a, &k.b, &k.c, &M->q);
    int q = M->q;
    if ((rc = comm_split(&M->swap, c, 0, k.a * q * q + k.c * q + k.b))) return cfail(M, rc, c);
    if ((rc = par_mm3d_create(&M->m2, M->swap, err, sizeof err))) return tpl_fail(M, rc, "%s", err);
    M->hid = par_mm3d_axis(M->m1, "l");
    M->rep[0][0] = par_mm3d_axis(M->m1, "i"), M->rep[0][1] = par_mm3d_axis(M->m1, "j");
    M->rep[1][0] = par_mm3d_axis(M->m1, "i"), M->rep[1][1] = par_mm3d_axis(M->m1, "l");
    const char *ax[3] = {"i", "j", "l"};
    for (int a = 0; a < 3; a++) M->groups[M->ngroups++] = par_mm3d_axis(M->m1, ax[a]);
    for (int a = 0; a < 3; a++) M->groups[M->ngroups++] = par_mm3d_axis(M->m2, ax[a]);
    M->md = q, M->rowsplit = (int64_t)q * q, M->rowblk = (int64_t)k.a * q + k.b;
    break;
  }
  default: return tpl_fail(M, STRATA_EINVAL, "tensor-parallel layer: unknown mode %d", (int)M->mode);
  }
  int64_t kdiv = M->mode == PAR_TP_3D ? (int64_t)M->q * M->q : M->md;
  if ((rc = check_shape(M, "hidden", C, kdiv, "the weights' blocks")) ||
      (rc = check_shape(M, "heads", heads, M->md, "each rank's heads")) ||
      (rc = check_shape(M, "hidden", C, heads, "the heads' width")))
    return rc;
  M->C = C, M->heads = heads, M->hl = heads / M->md;
  M->acols = M->mode == PAR_TP_1D ? C : C / M->q;
  M->col0 = M->mode == PAR_TP_1D ? 0 : (int64_t)(M->mode == PAR_TP_3D ? k.c : k.b) * M->acols;
  set_geometry(M, k);
  int64_t off[2] = {0, 0}, wmax = 0;
  for (int i = 0; i < TPL_NPARAM; i++) {
    const tpl_geom_t *g = &M->g[i];
    if (is_weight(i)) wmax = g->parts * g->nn * g->kn > wmax ? g->parts * g->nn * g->kn : wmax;
    else M->voff[i] = off[g->pack], off[g->pack] += g->parts * g->nn;
  }
  for (int i = 0; i < TPL_NPARAM; i++)
    if (!is_weight(i) && M->g[i].pack) M->voff[i] += off[0];
  M->packlen[0] = off[0], M->packlen[1] = off[1];
  if ((rc = alloc2(M, &M->gvec, off[0] + off[1], 0)) || (rc = alloc2(M, &M->wt, wmax, 0)) ||
      (rc = alloc2(M, &M->dwt, wmax, 0)))
    return rc;
  return count_partners(M);
}

int tpl_mesh_create(tpl_mesh_t **out, comm_t *c, tensor_ctx_t *tc, int device, par_tp_mode_t mode, int depth,
                    int64_t hidden, int64_t heads, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out || !c || !tc) return STRATA_EINVAL;
  *out = NULL;
  tpl_mesh_t *M = calloc(1, sizeof *M);
  if (!M) return STRATA_ENOMEM;
  M->mode = mode, M->depth = depth ? depth : 1, M->tc = tc, M->dev = device;
  int rc = build(M, c, hidden, heads);
  if (rc) {
    if (err && errlen) snprintf(err, errlen, "%s", M->err);
    tpl_mesh_destroy(M);
    return rc;
  }
  *out = M;
  return STRATA_OK;
}

static void free_scratch(tpl_mesh_t *M) {
  tensor_t *s[] = {&M->tmp, &M->dres, &M->dln, &M->dqkv, &M->datty, &M->dfch, &M->dgel, &M->stats};
  for (size_t i = 0; i < sizeof s / sizeof *s; i++) tensor_free(M->tc, s[i]);
  M->rows = 0;
}

void tpl_mesh_destroy(tpl_mesh_t *M) {
  if (!M) return;
  free_scratch(M);
  tensor_free(M->tc, &M->gvec), tensor_free(M->tc, &M->wt), tensor_free(M->tc, &M->dwt);
  par_mm3d_destroy(M->m2);
  if (M->swap) comm_destroy(M->swap);
  par_mm3d_destroy(M->m1);
  par_summa_destroy(M->summa);
  if (M->tp) comm_destroy(M->tp);
  if (M->aux) comm_destroy(M->aux);
  free(M);
}

int tpl_prepare(tpl_mesh_t *M, int64_t B, int64_t T, int64_t *rows, int64_t *row0) {
  int rc;
  if (B < 1 || B % M->rowsplit)
    return tpl_fail(M, STRATA_EINVAL,
                    "%s tensor parallelism over %d ranks: a batch of %lld sequences does not divide over the %lld row "
                    "blocks (each rank keeps whole sequences)",
                    mode_name(M->mode), comm_size(M->aux), (long long)B, (long long)M->rowsplit);
  int64_t R = B * T / M->rowsplit, A = M->acols, w1 = M->C / M->md;
  if (rows) *rows = R;
  if (row0) *row0 = M->rowblk * R;
  if (R == M->rows) return STRATA_OK;
  free_scratch(M);
  if ((rc = alloc2(M, &M->tmp, R, A)) || (rc = alloc2(M, &M->dres, R, A)) || (rc = alloc2(M, &M->dln, R, A)) ||
      (rc = alloc2(M, &M->dqkv, R, 3 * w1)) || (rc = alloc2(M, &M->datty, R, w1)) ||
      (rc = alloc2(M, &M->dfch, R, 4 * w1)) || (rc = alloc2(M, &M->dgel, R, 4 * w1)) ||
      (rc = alloc2(M, &M->stats, 2 * R, 0)))
    return rc;
  M->rows = R;
  return STRATA_OK;
}

void tpl_acts_free(tpl_mesh_t *M, tpl_acts_t *a) {
  tensor_t *all[] = {&a->ln1, &a->mean1, &a->rstd1, &a->qkv, &a->atty, &a->lse, &a->res2,
                     &a->ln2, &a->mean2, &a->rstd2, &a->fch, &a->gel};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) tensor_free(M->tc, all[i]);
  for (int t = 0; t < 4; t++) par_mm3d_saved_free(M->tc, &a->keep[t]);
  a->rows = 0;
}

int tpl_acts_prepare(tpl_mesh_t *M, tpl_acts_t *a, int64_t R) {
  if (a->rows == R) return STRATA_OK;
  tpl_acts_free(M, a);
  int64_t A = M->acols, w1 = M->C / M->md;
  int rc;
  if ((rc = alloc2(M, &a->ln1, R, A)) || (rc = alloc2(M, &a->res2, R, A)) || (rc = alloc2(M, &a->ln2, R, A)) ||
      (rc = alloc2(M, &a->mean1, R, 0)) || (rc = alloc2(M, &a->rstd1, R, 0)) || (rc = alloc2(M, &a->mean2, R, 0)) ||
      (rc = alloc2(M, &a->rstd2, R, 0)) || (rc = alloc2(M, &a->qkv, R, 3 * w1)) || (rc = alloc2(M, &a->atty, R, w1)) ||
      (rc = alloc2(M, &a->fch, R, 4 * w1)) || (rc = alloc2(M, &a->gel, R, 4 * w1)) ||
      (rc = alloc2(M, &a->lse, R * M->hl, 0)))
    return rc;
  a->rows = R;
  return STRATA_OK;
}

int tpl_init_part(tpl_mesh_t *M, const tpl_geom_t *g, const char *name, uint64_t seed, int64_t N, int64_t K, float std,
                  float fill, float *dst) {
  int64_t kn = K ? g->kn : 1, sh[2] = {g->nn, kn};
  for (int part = 0; part < g->parts; part++) {
    tensor_t t = tensor_view(dst + (int64_t)part * g->nn * kn, TENSOR_F32, M->dev, K ? 2 : 1, sh);
    tensor_slice_t sl = {.ndim = K ? 2 : 1, .shape = {N, K}, .start = {part * g->np + g->n0, g->k0}};
    int rc = std > 0 ? tensor_fill_normal(M->tc, &t, seed, name, &sl, 0.f, std) : tensor_fill(M->tc, &t, fill);
    if (rc) return tfail(M, rc);
  }
  return STRATA_OK;
}

/* ---- the pieces ---------------------------------------------------------- */

int tpl_allreduce(tpl_mesh_t *M, comm_t *g, float *buf, int64_t n) {
  if (!g || comm_size(g) < 2) return STRATA_OK;
  int rc = comm_allreduce(g, buf, buf, (size_t)n, COMM_F32, COMM_SUM);
  return rc ? cfail(M, rc, g) : STRATA_OK;
}

/* Layernorm of the rows of this rank's columns, the statistics of each row
 * summed over M->hid: the mean, then the variance about it (two passes, as
 * a whole row's layernorm computes them); libtensor's split layernorm does
 * the work between the sums, on the CPU or the device. */
int tpl_ln_forward(tpl_mesh_t *M, tensor_t *out, tensor_t *mean, tensor_t *rstd, const tensor_t *in, const tensor_t *w,
                   const tensor_t *b) {
  int rc;
  int64_t R = tensor_numel(in) / M->acols;
  for (int phase = 0; phase < 3; phase++) {
    if ((rc = tensor_layernorm_split_forward(M->tc, out, mean, rstd, in, w, b, M->C, LN_EPS, phase)))
      return tfail(M, rc);
    if (phase < 2 && (rc = tpl_allreduce(M, M->hid, phase ? rstd->data : mean->data, R))) return rc;
  }
  return STRATA_OK;
}

/* din += the layernorm's backward (Ba et al.: dx = rstd (dxhat - mean(dxhat)
 * - xhat mean(dxhat xhat)), the two means over the whole row, summed over
 * M->hid); dgw, dgb += this rank's rows' part of the parameters' gradients
 * (views of A floats on the mesh's device). */
int tpl_ln_backward(tpl_mesh_t *M, tensor_t *din, tensor_t *dgw, tensor_t *dgb, const tensor_t *dout,
                    const tensor_t *in, const tensor_t *mean, const tensor_t *rstd, const tensor_t *w) {
  int64_t R = tensor_numel(in) / M->acols;
  if (tensor_numel(&M->stats) < 2 * R) return tpl_fail(M, STRATA_ESTATE, "tensor-parallel layer: not prepared");
  tensor_t st = tensor_view1(M->stats.data, TENSOR_F32, M->dev, 2 * R);
  int rc = tensor_layernorm_split_backward(M->tc, NULL, dgw, dgb, &st, dout, in, w, mean, rstd, M->C, 0);
  if (rc) return tfail(M, rc);
  if ((rc = tpl_allreduce(M, M->hid, st.data, 2 * R))) return rc;
  if ((rc = tensor_layernorm_split_backward(M->tc, din, NULL, NULL, &st, dout, in, w, mean, rstd, M->C, 1)))
    return tfail(M, rc);
  return STRATA_OK;
}

/* The K x N block the 2D and 3D products take, of weight w (N x K) into M->wt. */
static int weight_kn(tpl_mesh_t *M, const tensor_t *w, tensor_t *wk) {
  int64_t N = w->shape[0], K = w->shape[1];
  *wk = tensor_view2(M->wt.data, TENSOR_F32, M->dev, K, N);
  int rc = tensor_transpose(M->tc, wk, w, 0);
  return rc ? tfail(M, rc) : STRATA_OK;
}

/* y = product t of x, plus its bias. */
static int lin_forward(tpl_mesh_t *M, const tpl_params_t *P, tpl_acts_t *a, int t, tensor_t *y, const tensor_t *x) {
  int rc = STRATA_OK;
  const tensor_t *w = &P->p[lin_w[t]], *b = &P->p[lin_w[t] + 1];
  switch (M->mode) {
  case PAR_TP_1D: /* column-parallel (qkv, fc) alone; row-parallel summed over the group (Megatron's g) */
    if ((rc = tensor_matmul(M->tc, y, x, w, 0, 1, 1.f, 0.f))) return tfail(M, rc);
    if ((t & 1) && (rc = tpl_allreduce(M, M->tp, y->data, tensor_numel(y)))) return rc;
    break;
  case PAR_TP_2D:
  case PAR_TP_2P5D: {
    tensor_t wk;
    if ((rc = weight_kn(M, w, &wk))) return rc;
    if ((rc = par_summa_forward(M->summa, M->tc, y, x, &wk))) return tpl_fail(M, rc, "%s", par_summa_error(M->summa));
    break;
  }
  case PAR_TP_3D: {
    par_mm3d_t *m = t & 1 ? M->m2 : M->m1;
    tensor_t wk;
    if ((rc = weight_kn(M, w, &wk))) return rc;
    if ((rc = par_mm3d_forward_saved(m, M->tc, y, x, &wk, &a->keep[t]))) return tpl_fail(M, rc, "%s", par_mm3d_error(m));
    break;
  }
  }
  if ((rc = tensor_bias_add_forward(M->tc, y, y, b))) return tfail(M, rc);
  return STRATA_OK;
}

/* dx = dL/dx of product t, its weight's gradient added to, its bias's into gvec. */
static int lin_backward(tpl_mesh_t *M, tpl_params_t *P, tpl_acts_t *a, int t, tensor_t *dx, const tensor_t *dy,
                        const tensor_t *x) {
  int rc = STRATA_OK, wi = lin_w[t];
  const tensor_t *w = &P->p[wi];
  tensor_t *dw = &P->g[wi];
  int64_t N = w->shape[0], K = w->shape[1];
  if ((rc = tensor_zero(M->tc, dx))) return tfail(M, rc);
  if (M->mode == PAR_TP_1D) { /* dX = dY W (column-parallel: summed over the group, Megatron's f), dW += dY^T X */
    if ((rc = tensor_matmul(M->tc, dx, dy, w, 0, 0, 1.f, 0.f)) || (rc = tensor_matmul(M->tc, dw, dy, x, 1, 0, 1.f, 1.f)))
      return tfail(M, rc);
    if (!(t & 1) && (rc = tpl_allreduce(M, M->tp, dx->data, tensor_numel(dx)))) return rc;
  } else { /* the products' K x N gradient into dwt, added to dW transposed */
    tensor_t dwk = tensor_view2(M->dwt.data, TENSOR_F32, M->dev, K, N);
    if ((rc = tensor_zero(M->tc, &dwk))) return tfail(M, rc);
    if (M->mode == PAR_TP_3D) {
      par_mm3d_t *m = t & 1 ? M->m2 : M->m1;
      if ((rc = par_mm3d_backward_saved(m, M->tc, dx, &dwk, dy, &a->keep[t])))
        return tpl_fail(M, rc, "%s", par_mm3d_error(m));
    } else {
      tensor_t wk;
      if ((rc = weight_kn(M, w, &wk))) return rc;
      if ((rc = par_summa_backward(M->summa, M->tc, dx, &dwk, dy, x, &wk)))
        return tpl_fail(M, rc, "%s", par_summa_error(M->summa));
    }
    tensor_t dwn = tensor_view2(dw->data, TENSOR_F32, M->dev, N, K);
    if ((rc = tensor_transpose(M->tc, &dwn, &dwk, 1))) return tfail(M, rc);
  }
  const tpl_geom_t *g = &M->g[wi + 1];
  tensor_t db = tensor_view1((float *)M->gvec.data + M->voff[wi + 1], TENSOR_F32, M->dev, g->parts * g->nn);
  if ((rc = tensor_bias_add_backward(M->tc, NULL, &db, dy))) return tfail(M, rc);
  return STRATA_OK;
}

/* (B, T, width) views of a rows x width block for attention. */
static tensor_t seqs(const tensor_t *t, int64_t rows, int64_t T, int64_t width) {
  int64_t s[3] = {rows / T, T, width};
  return tensor_view(t->data, TENSOR_F32, t->device, 3, s);
}

static int check_rows(tpl_mesh_t *M, const tpl_acts_t *a, const char *what, const tensor_t *t, int64_t T) {
  if (!t || t->dtype != TENSOR_F32 || t->device != M->dev || a->rows > M->rows || T < 1 || a->rows % T ||
      tensor_numel(t) != a->rows * M->acols) {
    char d[32] = "cpu";
    if (M->dev != TENSOR_CPU) snprintf(d, sizeof d, "cuda:%d", M->dev);
    return tpl_fail(M, STRATA_ESHAPE,
                    "tensor-parallel layer: %s must be this rank's fp32 block of %lld x %lld (sequences of %lld) on "
                    "the layer's device (%s)",
                    what, (long long)a->rows, (long long)M->acols, (long long)T, d);
  }
  return STRATA_OK;
}

int tpl_block_forward(tpl_mesh_t *M, const tpl_params_t *P, tpl_acts_t *a, tensor_t *y, const tensor_t *x, int64_t T) {
  int rc;
  if ((rc = check_rows(M, a, "x", x, T)) || (rc = check_rows(M, a, "y", y, T))) return rc;
  tensor_ctx_t *tc = M->tc;
  int64_t w1 = M->C / M->md, R = a->rows;
  tensor_t q3 = seqs(&a->qkv, R, T, 3 * w1), a3 = seqs(&a->atty, R, T, w1);
  int64_t ls[3] = {R / T, M->hl, T};
  tensor_t lse = tensor_view(a->lse.data, TENSOR_F32, M->dev, 3, ls);
  tensor_t xv = tensor_view2(x->data, TENSOR_F32, M->dev, R, M->acols);
  tensor_t yv = tensor_view2(y->data, TENSOR_F32, M->dev, R, M->acols);
  tensor_t tmp = tensor_view2(M->tmp.data, TENSOR_F32, M->dev, R, M->acols);
  if ((rc = tpl_ln_forward(M, &a->ln1, &a->mean1, &a->rstd1, &xv, &P->p[TPL_LN1W], &P->p[TPL_LN1B])) ||
      (rc = lin_forward(M, P, a, 0, &a->qkv, &a->ln1)))
    return rc;
  if ((rc = tensor_attention_forward(tc, &a3, &lse, &q3, (int)M->hl))) return tfail(M, rc);
  if ((rc = lin_forward(M, P, a, 1, &tmp, &a->atty))) return rc;
  if ((rc = tensor_add_forward(tc, &a->res2, &xv, &tmp))) return tfail(M, rc);
  if ((rc = tpl_ln_forward(M, &a->ln2, &a->mean2, &a->rstd2, &a->res2, &P->p[TPL_LN2W], &P->p[TPL_LN2B])) ||
      (rc = lin_forward(M, P, a, 2, &a->fch, &a->ln2)))
    return rc;
  if ((rc = tensor_gelu_forward(tc, &a->gel, &a->fch))) return tfail(M, rc);
  if ((rc = lin_forward(M, P, a, 3, &tmp, &a->gel))) return rc;
  if ((rc = tensor_add_forward(tc, &yv, &a->res2, &tmp))) return tfail(M, rc);
  return STRATA_OK;
}

/* The vector parameters' gradients of this backward (gvec), summed over
 * their replicas, added to theirs. */
static int vector_grads(tpl_mesh_t *M, tpl_params_t *P) {
  int rc;
  float *v = M->gvec.data;
  for (int pk = 0; pk < 2; pk++)
    for (int a = 0; a < 2; a++)
      if ((rc = tpl_allreduce(M, M->rep[pk][a], v + (pk ? M->packlen[0] : 0), M->packlen[pk]))) return rc;
  for (int i = 0; i < TPL_NPARAM; i++) {
    if (is_weight(i)) continue;
    tensor_t g = tensor_view1(v + M->voff[i], TENSOR_F32, M->dev, tensor_numel(&P->g[i]));
    if ((rc = tensor_add_forward(M->tc, &P->g[i], &P->g[i], &g))) return tfail(M, rc);
  }
  return STRATA_OK;
}

int tpl_block_backward(tpl_mesh_t *M, tpl_params_t *P, tpl_acts_t *a, tensor_t *dx, const tensor_t *dy,
                       const tensor_t *x, int64_t T) {
  int rc;
  if ((rc = check_rows(M, a, "dx", dx, T)) || (rc = check_rows(M, a, "dy", dy, T)) || (rc = check_rows(M, a, "x", x, T)))
    return rc;
  tensor_ctx_t *tc = M->tc;
  int64_t R = a->rows, A = M->acols, w1 = M->C / M->md;
  tensor_t dyv = tensor_view2(dy->data, TENSOR_F32, M->dev, R, A),
           dxv = tensor_view2(dx->data, TENSOR_F32, M->dev, R, A),
           xv = tensor_view2(x->data, TENSOR_F32, M->dev, R, A);
  tensor_t dres = tensor_view2(M->dres.data, TENSOR_F32, M->dev, R, A),
           dln = tensor_view2(M->dln.data, TENSOR_F32, M->dev, R, A),
           dgel = tensor_view2(M->dgel.data, TENSOR_F32, M->dev, R, 4 * w1),
           dfch = tensor_view2(M->dfch.data, TENSOR_F32, M->dev, R, 4 * w1),
           dqkv = tensor_view2(M->dqkv.data, TENSOR_F32, M->dev, R, 3 * w1),
           datty = tensor_view2(M->datty.data, TENSOR_F32, M->dev, R, w1);
  tensor_t q3 = seqs(&a->qkv, R, T, 3 * w1), dq3 = seqs(&dqkv, R, T, 3 * w1), a3 = seqs(&a->atty, R, T, w1),
           da3 = seqs(&datty, R, T, w1);
  int64_t ls[3] = {R / T, M->hl, T};
  tensor_t lse = tensor_view(a->lse.data, TENSOR_F32, M->dev, 3, ls);
  float *gv = M->gvec.data;
  tensor_t lnw1 = tensor_view1(gv + M->voff[TPL_LN1W], TENSOR_F32, M->dev, A),
           lnb1 = tensor_view1(gv + M->voff[TPL_LN1B], TENSOR_F32, M->dev, A),
           lnw2 = tensor_view1(gv + M->voff[TPL_LN2W], TENSOR_F32, M->dev, A),
           lnb2 = tensor_view1(gv + M->voff[TPL_LN2B], TENSOR_F32, M->dev, A);
  if ((rc = tensor_zero(tc, &M->gvec))) return tfail(M, rc);
  if ((rc = tensor_copy(tc, &dres, &dyv))) return tfail(M, rc); /* dL/d(res2): the residual path */
  if ((rc = lin_backward(M, P, a, 3, &dgel, &dyv, &a->gel))) return rc;
  if ((rc = tensor_zero(tc, &dfch)) || (rc = tensor_gelu_backward(tc, &dfch, &dgel, &a->fch))) return tfail(M, rc);
  if ((rc = lin_backward(M, P, a, 2, &dln, &dfch, &a->ln2)) ||
      (rc = tpl_ln_backward(M, &dres, &lnw2, &lnb2, &dln, &a->res2, &a->mean2, &a->rstd2, &P->p[TPL_LN2W])) ||
      (rc = lin_backward(M, P, a, 1, &datty, &dres, &a->atty)))
    return rc;
  if ((rc = tensor_zero(tc, &dqkv)) || (rc = tensor_attention_backward(tc, &dq3, &da3, &q3, &a3, &lse, (int)M->hl)))
    return tfail(M, rc);
  if ((rc = lin_backward(M, P, a, 0, &dln, &dqkv, &a->ln1))) return rc;
  if ((rc = tensor_copy(tc, &dxv, &dres))) return tfail(M, rc);
  if ((rc = tpl_ln_backward(M, &dxv, &lnw1, &lnb1, &dln, &xv, &a->mean1, &a->rstd1, &P->p[TPL_LN1W]))) return rc;
  return vector_grads(M, P);
}

/* ---- the standalone layer (strata/par_tplayer.h) -------------------------- */

struct par_tplayer {
  par_tplayer_config_t cfg;
  tpl_mesh_t *M;
  tpl_params_t P;
  tpl_acts_t a;
  tensor_t x; /* the forward's input, for the backward */
  int64_t rows, row0;
  char err[512];
};

int par_tplayer_nparams(void) { return TPL_NPARAM; }
const char *par_tplayer_param_name(int i) { return i >= 0 && i < TPL_NPARAM ? tpl_param_names[i] : NULL; }
const char *par_tplayer_error(const par_tplayer_t *L) { return L ? (L->M ? L->M->err : L->err) : ""; }

void par_tplayer_param_shape(const par_tplayer_t *L, int i, int64_t *rows, int64_t *cols) {
  int64_t N, K;
  whole_shape(L->cfg.hidden, i, &N, &K);
  if (rows) *rows = N;
  if (cols) *cols = K;
}

static int create_layer(par_tplayer_t *L, comm_t *c, tensor_ctx_t *tc) {
  const par_tplayer_config_t *cf = &L->cfg;
  int rc = tpl_mesh_create(&L->M, c, tc, cf->on_device ? cf->device : TENSOR_CPU, cf->mode, cf->depth, cf->hidden,
                           cf->heads, L->err, sizeof L->err);
  if (rc) return rc;
  tpl_mesh_t *M = L->M;
  if (cf->seq < 1) return tpl_fail(M, STRATA_EINVAL, "tensor-parallel layer: seq %lld must be >= 1", (long long)cf->seq);
  if ((rc = tpl_prepare(M, cf->batch, cf->seq, &L->rows, &L->row0)) || (rc = tpl_acts_prepare(M, &L->a, L->rows)) ||
      (rc = alloc2(M, &L->x, L->rows, M->acols)))
    return rc;
  float std = cf->init_std > 0 ? cf->init_std : 0.02f;
  for (int i = 0; i < TPL_NPARAM; i++) {
    int64_t r, k, N, K;
    tpl_param_shape(M, i, &r, &k);
    whole_shape(cf->hidden, i, &N, &K);
    if ((rc = alloc2(M, &L->P.p[i], r, k)) || (rc = alloc2(M, &L->P.g[i], r, k))) return rc;
    char nm[64];
    snprintf(nm, sizeof nm, "h.0.%s", tpl_param_names[i]);
    /* par_gpt's values of layer 0 of a one-layer model (its residual projections std / sqrt(2)) */
    float s = is_weight(i) ? (i == TPL_PROJW || i == TPL_FCPW ? std / sqrtf(2.f) : std) : 0.f;
    float fill = i == TPL_LN1W || i == TPL_LN2W ? 1.f : 0.f;
    if ((rc = tpl_init_part(M, &M->g[i], nm, cf->seed, N, K, s, fill, L->P.p[i].data))) return rc;
  }
  return STRATA_OK;
}

int par_tplayer_create(par_tplayer_t **out, comm_t *c, tensor_ctx_t *tc, const par_tplayer_config_t *cfg, char *err,
                       size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out || !c || !tc || !cfg) return STRATA_EINVAL;
  *out = NULL;
  par_tplayer_t *L = calloc(1, sizeof *L);
  if (!L) return STRATA_ENOMEM;
  L->cfg = *cfg;
  if (L->cfg.depth == 0) L->cfg.depth = 1;
  int rc = create_layer(L, c, tc);
  if (rc) {
    if (err && errlen) snprintf(err, errlen, "%s", par_tplayer_error(L));
    par_tplayer_destroy(L);
    return rc;
  }
  *out = L;
  return STRATA_OK;
}

void par_tplayer_destroy(par_tplayer_t *L) {
  if (!L) return;
  if (L->M) {
    tensor_ctx_t *tc = L->M->tc;
    tpl_acts_free(L->M, &L->a);
    tensor_free(tc, &L->x);
    for (int i = 0; i < TPL_NPARAM; i++) tensor_free(tc, &L->P.p[i]), tensor_free(tc, &L->P.g[i]);
    tpl_mesh_destroy(L->M);
  }
  free(L);
}

void par_tplayer_block(const par_tplayer_t *L, int64_t *rows, int64_t *cols, int64_t *row0, int64_t *col0) {
  if (rows) *rows = L->rows;
  if (cols) *cols = L->M->acols;
  if (row0) *row0 = L->row0;
  if (col0) *col0 = L->M->col0;
}

int par_tplayer_forward(par_tplayer_t *L, tensor_t *y, const tensor_t *x) {
  if (!L) return STRATA_EINVAL;
  int rc = check_rows(L->M, &L->a, "x", x, L->cfg.seq);
  if (rc) return rc;
  if ((rc = tensor_copy(L->M->tc, &L->x, x))) return tfail(L->M, rc);
  return tpl_block_forward(L->M, &L->P, &L->a, y, &L->x, L->cfg.seq);
}

int par_tplayer_backward(par_tplayer_t *L, tensor_t *dx, const tensor_t *dy) {
  if (!L) return STRATA_EINVAL;
  return tpl_block_backward(L->M, &L->P, &L->a, dx, dy, &L->x, L->cfg.seq);
}

void par_tplayer_zero_grad(par_tplayer_t *L) {
  for (int i = 0; L && i < TPL_NPARAM; i++) tensor_zero(L->M->tc, &L->P.g[i]);
}

static int check_index(par_tplayer_t *L, int i, const void *whole) {
  if (!L) return STRATA_EINVAL;
  if (i < 0 || i >= TPL_NPARAM || !whole)
    return tpl_fail(L->M, STRATA_EINVAL, "tensor-parallel layer: no parameter %d (there are %d)", i, TPL_NPARAM);
  return STRATA_OK;
}

/* Parameter i's part at `part` into its place in the whole (N x K, or N),
 * or (to_whole 0) out of it; *n the whole's elements. */
static int part_whole(par_tplayer_t *L, int i, float *part, float *whole, int to_whole, int64_t *n) {
  int rc = check_index(L, i, whole);
  if (rc) return rc;
  const tpl_geom_t *g = &L->M->g[i];
  int64_t N, K;
  whole_shape(L->cfg.hidden, i, &N, &K);
  int64_t Kw = K ? K : 1, kn = K ? g->kn : 1, rows = g->parts * g->nn;
  *n = N * Kw;
  if (to_whole && !g->owner) return STRATA_OK; /* (the one replica speaks for the part) */
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < kn; k++) {
      int64_t at = tpl_whole_at(g, r, k, Kw);
      if (to_whole) whole[at] = part[r * kn + k];
      else part[r * kn + k] = whole[at];
    }
  return STRATA_OK;
}

/* A host copy of tensor t (a part on a device; on the CPU t itself, no
 * copy: *own stays NULL). Caller frees *own. */
static int host_part(par_tplayer_t *L, const tensor_t *t, float **part, float **own, int fill) {
  *own = NULL, *part = t->data;
  if (t->device == TENSOR_CPU) return STRATA_OK;
  int64_t n = tensor_numel(t);
  if (!(*own = malloc(sizeof(float) * (size_t)(n ? n : 1))))
    return tpl_fail(L->M, STRATA_ENOMEM, "tensor-parallel layer: %lld floats of host staging", (long long)n);
  *part = *own;
  tensor_t h = tensor_view1(*own, TENSOR_F32, TENSOR_CPU, n), d = tensor_view1(t->data, TENSOR_F32, t->device, n);
  int rc = fill ? tensor_copy(L->M->tc, &h, &d) : STRATA_OK;
  return rc ? tfail(L->M, rc) : STRATA_OK;
}

int par_tplayer_get(par_tplayer_t *L, int i, int grad, float *whole) {
  int64_t n = 0;
  int rc = check_index(L, i, whole);
  if (rc) return rc;
  const tensor_t *t = grad ? &L->P.g[i] : &L->P.p[i];
  float *part = NULL, *own = NULL; /* (on a device: staged through the host; not a training step's path) */
  if ((rc = host_part(L, t, &part, &own, 1))) return rc;
  int64_t N, K;
  whole_shape(L->cfg.hidden, i, &N, &K);
  memset(whole, 0, sizeof(float) * (size_t)(N * (K ? K : 1)));
  if (!(rc = part_whole(L, i, part, whole, 1, &n))) rc = tpl_allreduce(L->M, L->M->aux, whole, n);
  free(own);
  return rc;
}

int par_tplayer_set(par_tplayer_t *L, int i, const float *whole) {
  int64_t n = 0;
  int rc = check_index(L, i, whole);
  if (rc) return rc;
  tensor_t *t = &L->P.p[i];
  float *part = NULL, *own = NULL;
  if ((rc = host_part(L, t, &part, &own, 0))) return rc;
  if (!(rc = part_whole(L, i, part, (float *)whole, 0, &n)) && own) {
    int64_t k = tensor_numel(t);
    tensor_t h = tensor_view1(own, TENSOR_F32, TENSOR_CPU, k), d = tensor_view1(t->data, TENSOR_F32, t->device, k);
    if ((rc = tensor_copy(L->M->tc, &d, &h))) rc = tfail(L->M, rc);
  }
  free(own);
  return rc;
}

void tpl_traffic(const tpl_mesh_t *M, uint64_t *sent, uint64_t *recv) {
  uint64_t s = 0, r = 0;
  for (int k = 0; M && k < M->ngroups; k++)
    for (int kind = 0; kind < COMM_NKINDS; kind++) {
      comm_counter_t n;
      if (comm_counters(M->groups[k], (comm_kind_t)kind, &n) == STRATA_OK) s += n.bytes_sent, r += n.bytes_recv;
    }
  if (sent) *sent = s;
  if (recv) *recv = r;
}

void par_tplayer_traffic(const par_tplayer_t *L, uint64_t *sent, uint64_t *recv) {
  tpl_traffic(L ? L->M : NULL, sent, recv);
}

int par_tplayer_run(par_tplayer_t *L, int steps, uint64_t *sent, uint64_t *recv, double *seconds) {
  if (!L || steps < 1) return STRATA_EINVAL;
  tpl_mesh_t *M = L->M;
  tensor_t x = {0}, y = {0}, dy = {0}, dx = {0};
  int rc;
  if ((rc = alloc2(M, &x, L->rows, M->acols)) || (rc = alloc2(M, &y, L->rows, M->acols)) ||
      (rc = alloc2(M, &dy, L->rows, M->acols)) || (rc = alloc2(M, &dx, L->rows, M->acols)))
    goto done;
  if ((rc = tensor_fill_normal(M->tc, &x, L->cfg.seed, "x", NULL, 0.f, 1.f)) ||
      (rc = tensor_fill_normal(M->tc, &dy, L->cfg.seed, "dy", NULL, 0.f, 1.f))) {
    rc = tfail(M, rc);
    goto done;
  }
  par_tplayer_traffic_reset(L);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int k = 0; k < steps && !rc; k++)
    if (!(rc = par_tplayer_forward(L, &y, &x))) rc = par_tplayer_backward(L, &dx, &dy);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (seconds) *seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  tpl_traffic(M, sent, recv);
done:
  tensor_free(M->tc, &x), tensor_free(M->tc, &y), tensor_free(M->tc, &dy), tensor_free(M->tc, &dx);
  return rc;
}

void par_tplayer_traffic_reset(par_tplayer_t *L) {
  for (int k = 0; L && k < L->M->ngroups; k++) comm_counters_reset(L->M->groups[k]);
}

int par_tplayer_partners(const par_tplayer_t *L) { return L ? L->M->partners : 0; }
