/* One transformer layer under 1D, 2D, 2.5D or 3D tensor parallelism
 * (strata/par_tplayer.h): the products by Megatron's column/row split, by
 * SUMMA or by the 3D product; layernorm with its row statistics summed over
 * the ranks that share a row; attention on the rank's own sequences and
 * heads; the vector parameters' gradients summed over their replicas. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/par_mm3d.h>
#include <strata/par_summa.h>
#include <strata/par_tplayer.h>

#define LN_EPS 1e-5f /* par_gpt's */

enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB, NPARAM };
static const char *const pname[NPARAM] = {"ln_1.w",      "ln_1.b",      "attn.qkv.w", "attn.qkv.b",
                                          "attn.proj.w", "attn.proj.b", "ln_2.w",     "ln_2.b",
                                          "mlp.fc.w",    "mlp.fc.b",    "mlp.proj.w", "mlp.proj.b"};
/* The products in order (qkv, proj, fc, fcproj): weight, bias, and K, N in C. */
static const int lin_w[4] = {QKVW, PROJW, FCW, FCPW}, lin_k[4] = {1, 1, 1, 4}, lin_n[4] = {3, 1, 4, 1};

/* Where a rank's part of a parameter lies in the whole (par_gpt's layout,
 * N x K for a weight, N for a vector): rows k0 .. k0 + kn of the input
 * dimension, and of the output dimension, cut in `parts` equal parts of np
 * (q, k and v), the columns n0 .. n0 + nn of each part. */
typedef struct {
  int64_t k0, kn, n0, nn, np;
  int parts, owner; /* owner: the one replica that answers par_tplayer_get */
  int pack;         /* vectors: 0 or 1, the group of replicas their gradients are summed over */
} geom_t;

struct par_tplayer {
  par_tplayer_config_t cfg;
  tensor_ctx_t *tc;
  comm_t *tp, *aux; /* 1D's group; a duplicate for get and set (uncounted) */
  par_summa_t *summa;
  par_mm3d_t *m1, *m2;
  par_mm3d_saved_t keep[4]; /* 3D: each product's gathered input and weight, for its backward */
  comm_t *swap;          /* c with j and l exchanged (the 3D product of a pair's second) */
  comm_t *hid;           /* the ranks sharing this rank's rows (layernorm statistics) */
  comm_t *rep[2][2];     /* per pack, the groups its vector gradients are summed over */
  comm_t *groups[8];     /* every group the layer talks on */
  int ngroups, partners;
  int md;                /* the heads' and the products' width divisor */
  int64_t R, C, rows, acols, row0, col0, hl;
  geom_t g[NPARAM];
  tensor_t p[NPARAM], dp[NPARAM];
  tensor_t x, ln1, mean1, rstd1, qkv, atty, lse, res2, ln2, mean2, rstd2, fch, gel; /* kept by forward */
  tensor_t tmp, dres, dln, dqkv, datty, dfch, dgel, stats, gvec;                   /* scratch */
  int64_t voff[NPARAM], packlen[2];                                                /* gvec's layout */
  char err[512];
};

static int fail(par_tplayer_t *L, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(par_tplayer_t *L, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(L->err, sizeof L->err, fmt, ap);
  va_end(ap);
  return rc;
}
static int tfail(par_tplayer_t *L, int rc) { return fail(L, rc, "tensor-parallel layer: %s", tensor_last_error(L->tc)); }
static int cfail(par_tplayer_t *L, int rc, comm_t *c) {
  return fail(L, rc, "tensor-parallel layer: %s", comm_last_error(c));
}

static const char *mode_name(par_tp_mode_t m) {
  return m == PAR_TP_1D ? "1D" : m == PAR_TP_2D ? "2D" : m == PAR_TP_2P5D ? "2.5D" : "3D";
}

int par_tplayer_nparams(void) { return NPARAM; }
const char *par_tplayer_param_name(int i) { return i >= 0 && i < NPARAM ? pname[i] : NULL; }
const char *par_tplayer_error(const par_tplayer_t *L) { return L ? L->err : ""; }

static int is_weight(int i) { return i == QKVW || i == PROJW || i == FCW || i == FCPW; }
/* The product a weight or bias belongs to (-1 for the layernorms). */
static int lin_of(int i) {
  for (int t = 0; t < 4; t++)
    if (i == lin_w[t] || i == lin_w[t] + 1) return t;
  return -1;
}

void par_tplayer_param_shape(const par_tplayer_t *L, int i, int64_t *rows, int64_t *cols) {
  int t = lin_of(i);
  int64_t n = t < 0 ? L->C : lin_n[t] * L->C, k = t < 0 ? 0 : lin_k[t] * L->C;
  if (rows) *rows = n;
  if (cols) *cols = is_weight(i) ? k : 0;
}

/* ---- geometry ------------------------------------------------------------ */

/* This rank's coordinates: 1D (r, -, -), 2D/2.5D (row i, column j, layer),
 * 3D (i, j, l); q the mesh's side (1D: tp). */
typedef struct {
  int a, b, c, q;
} coords_t;

static void set_geometry(par_tplayer_t *L, coords_t k) {
  int64_t C = L->C;
  int q = k.q;
  for (int i = 0; i < NPARAM; i++) {
    geom_t *g = &L->g[i];
    int t = lin_of(i);
    int64_t K = t < 0 ? 0 : lin_k[t] * C, N = t < 0 ? C : lin_n[t] * C;
    g->parts = i == QKVW || i == QKVB ? 3 : 1;
    g->np = N / g->parts, g->owner = 1, g->pack = 0;
    if (t < 0) { /* a layernorm's: the residual stream's columns */
      g->k0 = 0, g->kn = 1, g->n0 = L->col0, g->nn = L->acols;
    }
    int second = t >= 0 && (t & 1);
    switch (L->cfg.mode) {
    case PAR_TP_1D:
      if (t < 0) g->owner = k.a == 0;
      else if (!second) g->k0 = 0, g->kn = K, g->nn = g->np / q, g->n0 = k.a * g->nn;
      else g->k0 = k.a * (K / q), g->kn = K / q, g->n0 = 0, g->nn = N, g->owner = is_weight(i) || k.a == 0;
      break;
    case PAR_TP_2D:
    case PAR_TP_2P5D: /* (k.a, k.b) = (row, column), k.c the layer */
      if (t >= 0) g->k0 = k.a * (K / q), g->kn = K / q, g->nn = g->np / q, g->n0 = k.b * g->nn;
      g->owner = k.c == 0 && (is_weight(i) || k.a == 0);
      break;
    case PAR_TP_3D: /* (i, j, l) */
      if (t >= 0) {
        int kb = second ? k.b : k.c, nb = second ? k.c : k.b;
        g->k0 = kb * (K / q) + k.a * (K / ((int64_t)q * q)), g->kn = K / ((int64_t)q * q);
        g->nn = g->np / q, g->n0 = nb * g->nn;
      }
      g->pack = t >= 0 && !second; /* qkv's and fc's biases: the columns j, like their outputs */
      g->owner = is_weight(i) || (k.a == 0 && (g->pack ? k.c : k.b) == 0);
      break;
    }
    if (!is_weight(i)) g->k0 = 0, g->kn = 1;
  }
}

/* Element (n, k) of this rank's part (local N index n, K index k) in the
 * whole (N x K, row-major): its offset. */
static int64_t whole_at(const geom_t *g, int64_t n, int64_t k, int64_t K) {
  int64_t part = n / g->nn, gn = part * g->np + g->n0 + n % g->nn;
  return gn * K + g->k0 + k;
}

/* ---- creation ------------------------------------------------------------ */

static int alloc2(par_tplayer_t *L, tensor_t *t, int64_t r, int64_t c) {
  int64_t s[2] = {r, c};
  int rc = tensor_alloc(L->tc, t, TENSOR_F32, TENSOR_CPU, c ? 2 : 1, s);
  if (!rc) rc = tensor_zero(L->tc, t);
  return rc ? tfail(L, rc) : STRATA_OK;
}

/* Parameter i drawn by global index (par_gpt's names and values): a weight's
 * part is drawn as the N x K slices it is cut from, then transposed into
 * the K x N block the products take. */
static int init_param(par_tplayer_t *L, int i, float *scratch) {
  const geom_t *g = &L->g[i];
  float *dst = L->p[i].data;
  if (!is_weight(i)) {
    tensor_t t = L->p[i];
    return tensor_fill(L->tc, &t, i == LN1W || i == LN2W ? 1.f : 0.f);
  }
  int64_t N, K;
  par_tplayer_param_shape(L, i, &N, &K);
  char nm[64];
  snprintf(nm, sizeof nm, "h.0.%s", pname[i]);
  float std = L->cfg.init_std > 0 ? L->cfg.init_std : 0.02f;
  if (i == PROJW || i == FCPW) std /= sqrtf(2.f); /* par_gpt's residual projections of one layer */
  int64_t width = g->parts * g->nn;
  for (int part = 0; part < g->parts; part++) {
    tensor_slice_t sl = {.ndim = 2, .shape = {N, K}, .start = {part * g->np + g->n0, g->k0}};
    int64_t sh[2] = {g->nn, g->kn};
    tensor_t t = tensor_view(scratch, TENSOR_F32, TENSOR_CPU, 2, sh);
    int rc = tensor_fill_normal(L->tc, &t, L->cfg.seed, nm, &sl, 0.f, std);
    if (rc) return tfail(L, rc);
    for (int64_t n = 0; n < g->nn; n++)
      for (int64_t k = 0; k < g->kn; k++) dst[k * width + part * g->nn + n] = scratch[n * g->kn + k];
  }
  return STRATA_OK;
}

/* The ranks of c (by their rank in L->aux) that this rank's groups reach. */
static int count_partners(par_tplayer_t *L) {
  int n = comm_size(L->aux), me = comm_rank(L->aux), rc = STRATA_OK, count = 0;
  char *seen = calloc((size_t)n, 1);
  int *ranks = malloc(sizeof(int) * (size_t)n);
  if (!seen || !ranks) rc = fail(L, STRATA_ENOMEM, "tensor-parallel layer: no memory");
  for (int k = 0; k < L->ngroups && !rc; k++) {
    comm_t *g = L->groups[k];
    if ((rc = comm_allgather(g, ranks, &me, 1, COMM_I32))) rc = cfail(L, rc, g);
    for (int r = 0; !rc && r < comm_size(g); r++) seen[ranks[r]] = 1;
  }
  for (int r = 0; r < n; r++) count += seen[r] && r != me;
  free(seen), free(ranks);
  L->partners = count;
  return rc;
}

static int check_shape(par_tplayer_t *L, const char *what, int64_t v, int64_t by, const char *why) {
  if (v > 0 && by > 0 && v % by == 0) return STRATA_OK;
  return fail(L, STRATA_EINVAL, "%s tensor parallelism over %d ranks: %s %lld is not a positive multiple of %lld (%s)",
              mode_name(L->cfg.mode), comm_size(L->aux), what, (long long)v, (long long)by, why);
}

static int build(par_tplayer_t *L, comm_t *c) {
  int rc, n = comm_size(c), me = comm_rank(c);
  const par_tplayer_config_t *cf = &L->cfg;
  coords_t k = {me, 0, 0, n};
  int64_t rowsplit = 1;
  char err[256] = "";
  if ((rc = comm_dup(&L->aux, c))) return cfail(L, rc, c);
  switch (cf->mode) {
  case PAR_TP_1D:
    if (cf->depth != 1) return fail(L, STRATA_EINVAL, "1D tensor parallelism has no depth (got %d)", cf->depth);
    if ((rc = comm_dup(&L->tp, c))) return cfail(L, rc, c);
    L->groups[L->ngroups++] = L->tp;
    L->md = n;
    break;
  case PAR_TP_2D:
  case PAR_TP_2P5D:
    if (cf->mode == PAR_TP_2D && cf->depth != 1)
      return fail(L, STRATA_EINVAL, "2D tensor parallelism has no depth (got %d): use 2.5D", cf->depth);
    if ((rc = par_summa_create(&L->summa, c, cf->depth, err, sizeof err))) return fail(L, rc, "%s", err);
    par_summa_coords(L->summa, &k.a, &k.b, &k.q);
    par_summa_depth(L->summa, &k.c, NULL);
    L->hid = par_summa_row(L->summa);
    L->rep[0][0] = par_summa_col(L->summa), L->rep[0][1] = par_summa_dep(L->summa);
    L->groups[L->ngroups++] = par_summa_row(L->summa);
    L->groups[L->ngroups++] = par_summa_col(L->summa);
    if (par_summa_dep(L->summa)) L->groups[L->ngroups++] = par_summa_dep(L->summa);
    L->md = k.q, rowsplit = (int64_t)cf->depth * k.q;
    break;
  case PAR_TP_3D: {
    if (cf->depth != 1) return fail(L, STRATA_EINVAL, "3D tensor parallelism has no depth (got %d)", cf->depth);
    if ((rc = par_mm3d_create(&L->m1, c, err, sizeof err))) return fail(L, rc, "%s", err);
    par_mm3d_coords(L->m1, &k.a, &k.b, &k.c, &k.q);
    int q = k.q;
    if ((rc = comm_split(&L->swap, c, 0, k.a * q * q + k.c * q + k.b))) return cfail(L, rc, c);
    if ((rc = par_mm3d_create(&L->m2, L->swap, err, sizeof err))) return fail(L, rc, "%s", err);
    L->hid = par_mm3d_axis(L->m1, "l");
    L->rep[0][0] = par_mm3d_axis(L->m1, "i"), L->rep[0][1] = par_mm3d_axis(L->m1, "j");
    L->rep[1][0] = par_mm3d_axis(L->m1, "i"), L->rep[1][1] = par_mm3d_axis(L->m1, "l");
    const char *ax[3] = {"i", "j", "l"};
    for (int a = 0; a < 3; a++) L->groups[L->ngroups++] = par_mm3d_axis(L->m1, ax[a]);
    for (int a = 0; a < 3; a++) L->groups[L->ngroups++] = par_mm3d_axis(L->m2, ax[a]);
    L->md = q, rowsplit = (int64_t)q * q;
    break;
  }
  default: return fail(L, STRATA_EINVAL, "tensor-parallel layer: unknown mode %d", (int)cf->mode);
  }
  int64_t C = cf->hidden, kdiv = cf->mode == PAR_TP_3D ? (int64_t)k.q * k.q : L->md;
  if ((rc = check_shape(L, "hidden", C, kdiv, "the weights' blocks")) ||
      (rc = check_shape(L, "heads", cf->heads, L->md, "each rank's heads")) ||
      (rc = check_shape(L, "hidden", C, cf->heads, "the heads' width")) ||
      (rc = check_shape(L, "batch", cf->batch, rowsplit, "whole sequences on each rank")) ||
      (rc = check_shape(L, "seq", cf->seq, 1, "tokens per sequence")))
    return rc;
  L->C = C, L->R = cf->batch * cf->seq, L->rows = L->R / rowsplit, L->hl = cf->heads / L->md;
  L->acols = cf->mode == PAR_TP_1D ? C : C / k.q;
  int64_t rowblk = cf->mode == PAR_TP_1D ? 0 : cf->mode == PAR_TP_3D ? (int64_t)k.a * k.q + k.b : (int64_t)k.c * k.q + k.a;
  L->row0 = rowblk * L->rows;
  L->col0 = cf->mode == PAR_TP_1D ? 0 : (int64_t)(cf->mode == PAR_TP_3D ? k.c : k.b) * L->acols;
  set_geometry(L, k);

  int64_t biggest = 0, off[2] = {0, 0};
  for (int i = 0; i < NPARAM; i++) {
    const geom_t *g = &L->g[i];
    int64_t r = is_weight(i) ? g->kn : g->parts * g->nn, cc = is_weight(i) ? g->parts * g->nn : 0;
    if ((rc = alloc2(L, &L->p[i], r, cc)) || (rc = alloc2(L, &L->dp[i], r, cc))) return rc;
    if (g->nn * g->kn > biggest) biggest = g->nn * g->kn;
    if (!is_weight(i)) L->voff[i] = off[g->pack], off[g->pack] += g->parts * g->nn;
  }
  for (int i = 0; i < NPARAM; i++)
    if (!is_weight(i) && L->g[i].pack) L->voff[i] += off[0];
  L->packlen[0] = off[0], L->packlen[1] = off[1];
  float *scratch = malloc(sizeof(float) * (size_t)biggest);
  if (!scratch) return fail(L, STRATA_ENOMEM, "tensor-parallel layer: no memory");
  for (int i = 0; i < NPARAM && !rc; i++) rc = init_param(L, i, scratch);
  free(scratch);
  if (rc) return rc;

  int64_t R = L->rows, A = L->acols, w1 = C / L->md;
  tensor_t *acts[] = {&L->x, &L->ln1, &L->res2, &L->ln2, &L->tmp, &L->dres, &L->dln};
  for (size_t a = 0; a < sizeof acts / sizeof *acts; a++)
    if ((rc = alloc2(L, acts[a], R, A))) return rc;
  if ((rc = alloc2(L, &L->mean1, R, 0)) || (rc = alloc2(L, &L->rstd1, R, 0)) || (rc = alloc2(L, &L->mean2, R, 0)) ||
      (rc = alloc2(L, &L->rstd2, R, 0)) || (rc = alloc2(L, &L->stats, 2 * R, 0)) ||
      (rc = alloc2(L, &L->qkv, R, 3 * w1)) || (rc = alloc2(L, &L->dqkv, R, 3 * w1)) ||
      (rc = alloc2(L, &L->atty, R, w1)) || (rc = alloc2(L, &L->datty, R, w1)) ||
      (rc = alloc2(L, &L->fch, R, 4 * w1)) || (rc = alloc2(L, &L->gel, R, 4 * w1)) ||
      (rc = alloc2(L, &L->dfch, R, 4 * w1)) || (rc = alloc2(L, &L->dgel, R, 4 * w1)) ||
      (rc = alloc2(L, &L->lse, R * L->hl, 0)) || (rc = alloc2(L, &L->gvec, off[0] + off[1], 0)))
    return rc;
  if ((rc = count_partners(L))) return rc;
  par_tplayer_traffic_reset(L);
  return STRATA_OK;
}

int par_tplayer_create(par_tplayer_t **out, comm_t *c, tensor_ctx_t *tc, const par_tplayer_config_t *cfg, char *err,
                       size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out || !c || !tc || !cfg) return STRATA_EINVAL;
  *out = NULL;
  par_tplayer_t *L = calloc(1, sizeof *L);
  if (!L) return STRATA_ENOMEM;
  L->cfg = *cfg, L->tc = tc;
  if (L->cfg.depth == 0) L->cfg.depth = 1;
  int rc = build(L, c);
  if (rc) {
    if (err && errlen) snprintf(err, errlen, "%s", L->err);
    par_tplayer_destroy(L);
    return rc;
  }
  *out = L;
  return STRATA_OK;
}

void par_tplayer_destroy(par_tplayer_t *L) {
  if (!L) return;
  tensor_t *all[] = {&L->x,   &L->ln1,  &L->mean1, &L->rstd1, &L->qkv,   &L->atty, &L->lse,  &L->res2,
                     &L->ln2, &L->mean2, &L->rstd2, &L->fch,  &L->gel,   &L->tmp,  &L->dres, &L->dln,
                     &L->dqkv, &L->datty, &L->dfch, &L->dgel, &L->stats, &L->gvec};
  for (size_t a = 0; a < sizeof all / sizeof *all; a++) tensor_free(L->tc, all[a]);
  for (int i = 0; i < NPARAM; i++) tensor_free(L->tc, &L->p[i]), tensor_free(L->tc, &L->dp[i]);
  for (int t = 0; t < 4; t++) par_mm3d_saved_free(L->tc, &L->keep[t]);
  par_mm3d_destroy(L->m2);
  if (L->swap) comm_destroy(L->swap);
  par_mm3d_destroy(L->m1);
  par_summa_destroy(L->summa);
  if (L->tp) comm_destroy(L->tp);
  if (L->aux) comm_destroy(L->aux);
  free(L);
}

void par_tplayer_block(const par_tplayer_t *L, int64_t *rows, int64_t *cols, int64_t *row0, int64_t *col0) {
  if (rows) *rows = L->rows;
  if (cols) *cols = L->acols;
  if (row0) *row0 = L->row0;
  if (col0) *col0 = L->col0;
}

/* ---- the pieces ---------------------------------------------------------- */

static int allreduce(par_tplayer_t *L, comm_t *g, float *buf, int64_t n) {
  if (!g || comm_size(g) < 2) return STRATA_OK;
  int rc = comm_allreduce(g, buf, buf, (size_t)n, COMM_F32, COMM_SUM);
  return rc ? cfail(L, rc, g) : STRATA_OK;
}

/* Layernorm of the rows of this rank's columns, the statistics of each row
 * summed over L->hid: the mean, then the variance about it (two passes, as
 * a whole row's layernorm computes them). */
static int ln_forward(par_tplayer_t *L, tensor_t *out, tensor_t *mean, tensor_t *rstd, const tensor_t *in, int w) {
  int64_t R = L->rows, A = L->acols;
  const float *x = in->data, *gw = L->p[w].data, *gb = L->p[w + 1].data;
  float *y = out->data, *mu = mean->data, *rs = rstd->data;
  int rc;
  for (int64_t r = 0; r < R; r++) {
    double s = 0;
    for (int64_t c = 0; c < A; c++) s += x[r * A + c];
    mu[r] = (float)s;
  }
  if ((rc = allreduce(L, L->hid, mu, R))) return rc;
  for (int64_t r = 0; r < R; r++) {
    mu[r] /= (float)L->C;
    double s = 0;
    for (int64_t c = 0; c < A; c++) {
      double d = x[r * A + c] - mu[r];
      s += d * d;
    }
    rs[r] = (float)s;
  }
  if ((rc = allreduce(L, L->hid, rs, R))) return rc;
  for (int64_t r = 0; r < R; r++) {
    rs[r] = 1.f / sqrtf(rs[r] / (float)L->C + LN_EPS);
    for (int64_t c = 0; c < A; c++) y[r * A + c] = (x[r * A + c] - mu[r]) * rs[r] * gw[c] + gb[c];
  }
  return STRATA_OK;
}

/* din += the layernorm's backward (Ba et al.: dx = rstd (dxhat - mean(dxhat)
 * - xhat mean(dxhat xhat)), the two means over the whole row, summed over
 * L->hid); the parameters' gradients into gvec. */
static int ln_backward(par_tplayer_t *L, tensor_t *din, const tensor_t *dout, const tensor_t *in, const tensor_t *mean,
                       const tensor_t *rstd, int w) {
  int64_t R = L->rows, A = L->acols;
  const float *x = in->data, *dy = dout->data, *mu = mean->data, *rs = rstd->data, *gw = L->p[w].data;
  float *dx = din->data, *st = L->stats.data, *dgw = (float *)L->gvec.data + L->voff[w],
        *dgb = (float *)L->gvec.data + L->voff[w + 1];
  for (int64_t r = 0; r < R; r++) {
    double a = 0, b = 0;
    for (int64_t c = 0; c < A; c++) {
      float xh = (x[r * A + c] - mu[r]) * rs[r], g = dy[r * A + c] * gw[c];
      a += g, b += g * xh;
      dgw[c] += dy[r * A + c] * xh, dgb[c] += dy[r * A + c];
    }
    st[2 * r] = (float)a, st[2 * r + 1] = (float)b;
  }
  int rc = allreduce(L, L->hid, st, 2 * R);
  if (rc) return rc;
  float inv = 1.f / (float)L->C;
  for (int64_t r = 0; r < R; r++)
    for (int64_t c = 0; c < A; c++) {
      float xh = (x[r * A + c] - mu[r]) * rs[r], g = dy[r * A + c] * gw[c];
      dx[r * A + c] += rs[r] * (g - st[2 * r] * inv - xh * st[2 * r + 1] * inv);
    }
  return STRATA_OK;
}

/* y = product t of x, plus its bias. */
static int lin_forward(par_tplayer_t *L, int t, tensor_t *y, const tensor_t *x) {
  int rc = STRATA_OK;
  const tensor_t *w = &L->p[lin_w[t]], *b = &L->p[lin_w[t] + 1];
  switch (L->cfg.mode) {
  case PAR_TP_1D: /* column-parallel (qkv, fc) alone; row-parallel summed over the group (Megatron's g) */
    if ((rc = tensor_matmul(L->tc, y, x, w, 0, 0, 1.f, 0.f))) return tfail(L, rc);
    if ((t & 1) && (rc = allreduce(L, L->tp, y->data, tensor_numel(y)))) return rc;
    break;
  case PAR_TP_2D:
  case PAR_TP_2P5D:
    if ((rc = par_summa_forward(L->summa, L->tc, y, x, w))) return fail(L, rc, "%s", par_summa_error(L->summa));
    break;
  case PAR_TP_3D: {
    par_mm3d_t *m = t & 1 ? L->m2 : L->m1;
    if ((rc = par_mm3d_forward_saved(m, L->tc, y, x, w, &L->keep[t]))) return fail(L, rc, "%s", par_mm3d_error(m));
    break;
  }
  }
  if ((rc = tensor_bias_add_forward(L->tc, y, y, b))) return tfail(L, rc);
  return STRATA_OK;
}

/* dx = dL/dx of product t, its weight's gradient added to, its bias's into gvec. */
static int lin_backward(par_tplayer_t *L, int t, tensor_t *dx, const tensor_t *dy, const tensor_t *x) {
  int rc = STRATA_OK, wi = lin_w[t];
  const tensor_t *w = &L->p[wi];
  tensor_t *dw = &L->dp[wi];
  if ((rc = tensor_zero(L->tc, dx))) return tfail(L, rc);
  switch (L->cfg.mode) {
  case PAR_TP_1D: /* dX = dY W^T (column-parallel: summed over the group, Megatron's f), dW += X^T dY */
    if ((rc = tensor_matmul(L->tc, dx, dy, w, 0, 1, 1.f, 0.f)) || (rc = tensor_matmul(L->tc, dw, x, dy, 1, 0, 1.f, 1.f)))
      return tfail(L, rc);
    if (!(t & 1) && (rc = allreduce(L, L->tp, dx->data, tensor_numel(dx)))) return rc;
    break;
  case PAR_TP_2D:
  case PAR_TP_2P5D:
    if ((rc = par_summa_backward(L->summa, L->tc, dx, dw, dy, x, w)))
      return fail(L, rc, "%s", par_summa_error(L->summa));
    break;
  case PAR_TP_3D: {
    par_mm3d_t *m = t & 1 ? L->m2 : L->m1;
    if ((rc = par_mm3d_backward_saved(m, L->tc, dx, dw, dy, &L->keep[t]))) return fail(L, rc, "%s", par_mm3d_error(m));
    break;
  }
  }
  const geom_t *g = &L->g[wi + 1];
  tensor_t db = tensor_view1((float *)L->gvec.data + L->voff[wi + 1], TENSOR_F32, TENSOR_CPU, g->parts * g->nn);
  if ((rc = tensor_bias_add_backward(L->tc, NULL, &db, dy))) return tfail(L, rc);
  return STRATA_OK;
}

/* (B, T, width) views of a rows x width block for attention. */
static tensor_t seqs(par_tplayer_t *L, tensor_t *t, int64_t width) {
  int64_t s[3] = {L->rows / L->cfg.seq, L->cfg.seq, width};
  return tensor_view(t->data, TENSOR_F32, TENSOR_CPU, 3, s);
}

static int check_block(par_tplayer_t *L, const char *what, const tensor_t *t) {
  if (!t || t->dtype != TENSOR_F32 || t->device != TENSOR_CPU || tensor_numel(t) != L->rows * L->acols)
    return fail(L, STRATA_ESHAPE, "tensor-parallel layer: %s must be this rank's fp32 CPU block of %lld x %lld", what,
                (long long)L->rows, (long long)L->acols);
  return STRATA_OK;
}

int par_tplayer_forward(par_tplayer_t *L, tensor_t *y, const tensor_t *x) {
  if (!L) return STRATA_EINVAL;
  int rc;
  if ((rc = check_block(L, "x", x)) || (rc = check_block(L, "y", y))) return rc;
  tensor_ctx_t *tc = L->tc;
  int64_t w1 = L->C / L->md;
  memcpy(L->x.data, x->data, sizeof(float) * (size_t)(L->rows * L->acols));
  tensor_t q3 = seqs(L, &L->qkv, 3 * w1), a3 = seqs(L, &L->atty, w1), yv = *y;
  int64_t ls[3] = {L->rows / L->cfg.seq, L->hl, L->cfg.seq};
  tensor_t lse = tensor_view(L->lse.data, TENSOR_F32, TENSOR_CPU, 3, ls);
  yv = tensor_view2(y->data, TENSOR_F32, TENSOR_CPU, L->rows, L->acols);
  if ((rc = ln_forward(L, &L->ln1, &L->mean1, &L->rstd1, &L->x, LN1W)) || (rc = lin_forward(L, 0, &L->qkv, &L->ln1)))
    return rc;
  if ((rc = tensor_attention_forward(tc, &a3, &lse, &q3, (int)L->hl))) return tfail(L, rc);
  if ((rc = lin_forward(L, 1, &L->tmp, &L->atty))) return rc;
  if ((rc = tensor_add_forward(tc, &L->res2, &L->x, &L->tmp))) return tfail(L, rc);
  if ((rc = ln_forward(L, &L->ln2, &L->mean2, &L->rstd2, &L->res2, LN2W)) || (rc = lin_forward(L, 2, &L->fch, &L->ln2)))
    return rc;
  if ((rc = tensor_gelu_forward(tc, &L->gel, &L->fch))) return tfail(L, rc);
  if ((rc = lin_forward(L, 3, &L->tmp, &L->gel))) return rc;
  if ((rc = tensor_add_forward(tc, &yv, &L->res2, &L->tmp))) return tfail(L, rc);
  return STRATA_OK;
}

/* The vector parameters' gradients of this backward (gvec), summed over
 * their replicas, added to theirs. */
static int vector_grads(par_tplayer_t *L) {
  int rc;
  float *v = L->gvec.data;
  for (int pk = 0; pk < 2; pk++)
    for (int a = 0; a < 2; a++)
      if ((rc = allreduce(L, L->rep[pk][a], v + (pk ? L->packlen[0] : 0), L->packlen[pk]))) return rc;
  for (int i = 0; i < NPARAM; i++) {
    if (is_weight(i)) continue;
    tensor_t g = tensor_view1(v + L->voff[i], TENSOR_F32, TENSOR_CPU, tensor_numel(&L->dp[i]));
    if ((rc = tensor_add_forward(L->tc, &L->dp[i], &L->dp[i], &g))) return tfail(L, rc);
  }
  return STRATA_OK;
}

int par_tplayer_backward(par_tplayer_t *L, tensor_t *dx, const tensor_t *dy) {
  if (!L) return STRATA_EINVAL;
  int rc;
  if ((rc = check_block(L, "dx", dx)) || (rc = check_block(L, "dy", dy))) return rc;
  tensor_ctx_t *tc = L->tc;
  int64_t w1 = L->C / L->md, n = L->rows * L->acols;
  tensor_t dyv = tensor_view2(dy->data, TENSOR_F32, TENSOR_CPU, L->rows, L->acols),
           dxv = tensor_view2(dx->data, TENSOR_F32, TENSOR_CPU, L->rows, L->acols);
  tensor_t q3 = seqs(L, &L->qkv, 3 * w1), dq3 = seqs(L, &L->dqkv, 3 * w1), a3 = seqs(L, &L->atty, w1),
           da3 = seqs(L, &L->datty, w1);
  int64_t ls[3] = {L->rows / L->cfg.seq, L->hl, L->cfg.seq};
  tensor_t lse = tensor_view(L->lse.data, TENSOR_F32, TENSOR_CPU, 3, ls);
  if ((rc = tensor_zero(tc, &L->gvec))) return tfail(L, rc);
  memcpy(L->dres.data, dy->data, sizeof(float) * (size_t)n); /* dL/d(res2): the residual path */
  if ((rc = lin_backward(L, 3, &L->dgel, &dyv, &L->gel))) return rc;
  if ((rc = tensor_zero(tc, &L->dfch)) || (rc = tensor_gelu_backward(tc, &L->dfch, &L->dgel, &L->fch)))
    return tfail(L, rc);
  if ((rc = lin_backward(L, 2, &L->dln, &L->dfch, &L->ln2)) ||
      (rc = ln_backward(L, &L->dres, &L->dln, &L->res2, &L->mean2, &L->rstd2, LN2W)) ||
      (rc = lin_backward(L, 1, &L->datty, &L->dres, &L->atty)))
    return rc;
  if ((rc = tensor_zero(tc, &L->dqkv)) || (rc = tensor_attention_backward(tc, &dq3, &da3, &q3, &a3, &lse, (int)L->hl)))
    return tfail(L, rc);
  if ((rc = lin_backward(L, 0, &L->dln, &L->dqkv, &L->ln1))) return rc;
  memcpy(dxv.data, L->dres.data, sizeof(float) * (size_t)n);
  if ((rc = ln_backward(L, &dxv, &L->dln, &L->x, &L->mean1, &L->rstd1, LN1W))) return rc;
  return vector_grads(L);
}

void par_tplayer_zero_grad(par_tplayer_t *L) {
  for (int i = 0; L && i < NPARAM; i++) tensor_zero(L->tc, &L->dp[i]);
}

/* ---- whole parameters ---------------------------------------------------- */

static int check_index(par_tplayer_t *L, int i, const void *whole) {
  if (!L) return STRATA_EINVAL;
  if (i < 0 || i >= NPARAM || !whole)
    return fail(L, STRATA_EINVAL, "tensor-parallel layer: no parameter %d (there are %d)", i, NPARAM);
  return STRATA_OK;
}

int par_tplayer_get(par_tplayer_t *L, int i, int grad, float *whole) {
  int rc = check_index(L, i, whole);
  if (rc) return rc;
  const geom_t *g = &L->g[i];
  int64_t N, K;
  par_tplayer_param_shape(L, i, &N, &K);
  int64_t Kw = K ? K : 1, width = g->parts * g->nn;
  memset(whole, 0, sizeof(float) * (size_t)(N * Kw));
  const float *src = (grad ? L->dp[i] : L->p[i]).data;
  if (g->owner)
    for (int64_t n = 0; n < width; n++)
      for (int64_t k = 0; k < g->kn; k++) whole[whole_at(g, n, k, Kw)] = src[k * width + n];
  return allreduce(L, L->aux, whole, N * Kw);
}

int par_tplayer_set(par_tplayer_t *L, int i, const float *whole) {
  int rc = check_index(L, i, whole);
  if (rc) return rc;
  const geom_t *g = &L->g[i];
  int64_t K, width = g->parts * g->nn;
  par_tplayer_param_shape(L, i, NULL, &K);
  float *dst = L->p[i].data;
  for (int64_t n = 0; n < width; n++)
    for (int64_t k = 0; k < g->kn; k++) dst[k * width + n] = whole[whole_at(g, n, k, K ? K : 1)];
  return STRATA_OK;
}

/* ---- traffic ------------------------------------------------------------- */

void par_tplayer_traffic(const par_tplayer_t *L, uint64_t *sent, uint64_t *recv) {
  uint64_t s = 0, r = 0;
  for (int k = 0; L && k < L->ngroups; k++)
    for (int kind = 0; kind < COMM_NKINDS; kind++) {
      comm_counter_t n;
      if (comm_counters(L->groups[k], (comm_kind_t)kind, &n) == STRATA_OK) s += n.bytes_sent, r += n.bytes_recv;
    }
  if (sent) *sent = s;
  if (recv) *recv = r;
}

void par_tplayer_traffic_reset(par_tplayer_t *L) {
  for (int k = 0; L && k < L->ngroups; k++) comm_counters_reset(L->groups[k]);
}

int par_tplayer_partners(const par_tplayer_t *L) { return L ? L->partners : 0; }
