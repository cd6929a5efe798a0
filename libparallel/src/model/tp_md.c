/* The GPT model under 2D, 2.5D and 3D tensor parallelism
 * (par_gpt_options_t.tp_mode): its blocks are tplayer.c's blocks on the
 * model's parameter views; the residual stream is this rank's rows (whole
 * sequences) and columns; the embedding and the tied head keep the
 * residual stream's columns of the whole vocabulary (wte's column block,
 * replicated down the ranks that cut the rows): the embedding is looked up
 * locally, the logits of a rank's rows are its columns' partial products
 * summed over the ranks that share those rows, the cross-entropy runs on
 * every one of them alike, and the tables' gradients are summed over their
 * replicas after the backward, like every vector parameter's. */
#include <stdlib.h>
#include <string.h>

#include "gpt_internal.h"
#include "tpl_internal.h"

/* [dwte (V x A) | dwpe (Tm x A) | dln_f.w (A) | dln_f.b (A)] of one backward. */
static float *embg_at(par_gpt_t *m, int which) {
  int64_t A = m->md->acols, V = m->cfg.vocab, Tm = m->cfg.seq;
  float *p = m->md_embg.data;
  return which == 0 ? p : which == 1 ? p + V * A : which == 2 ? p + (V + Tm) * A : p + (V + Tm + 1) * A;
}

static int md_err(par_gpt_t *m, int rc) { return gpt_seterr(m, rc, "par_gpt: %s", m->md->err); }

int gpt_md_create(par_gpt_t *m) {
  char err[512];
  int depth = m->opts.tp_depth > 0 ? m->opts.tp_depth : 1;
  if (m->opts.tp_mode < PAR_TP_2D || m->opts.tp_mode > PAR_TP_3D)
    return gpt_seterr(NULL, STRATA_EINVAL, "par_gpt_create: tensor-parallel mode %d (0 1D, 1 2D, 2 2.5D, 3 3D)",
                      m->opts.tp_mode);
  int rc = tpl_mesh_create(&m->md, m->tp, m->tc, m->device, (par_tp_mode_t)m->opts.tp_mode, depth, m->cfg.hidden,
                           m->cfg.heads, err, sizeof err);
  if (rc) return gpt_seterr(NULL, rc, "par_gpt_create: %s", err);
  int64_t n = ((int64_t)m->cfg.vocab + m->cfg.seq + 2) * m->md->acols;
  if ((rc = tensor_alloc(m->tc, &m->md_embg, TENSOR_F32, m->device, 1, &n)))
    return gpt_seterr(NULL, rc, "par_gpt_create: %s", tensor_last_error(m->tc));
  return STRATA_OK;
}

void gpt_md_free_acts(par_gpt_t *m) {
  if (!m->md || !m->tacts) return;
  int n = m->cfg.recompute ? 1 : m->cfg.layers;
  for (int k = 0; k < n; k++) tpl_acts_free(m->md, &m->tacts[k]);
  free(m->tacts);
  m->tacts = NULL, m->md_rows = 0;
}

void gpt_md_destroy(par_gpt_t *m) {
  if (!m->md) return;
  gpt_md_free_acts(m);
  tensor_free(m->tc, &m->md_embg);
  tpl_mesh_destroy(m->md);
  m->md = NULL;
}

void gpt_md_view(par_gpt_t *m, par_gpt_view_t *v, int which, int64_t d0) {
  const tpl_mesh_t *M = m->md;
  tpl_geom_t g;
  if (which >= 0) g = M->g[which];
  else if (which == -3) g = M->cols;
  else /* wte, wpe: every row, the residual stream's columns */
    g = (tpl_geom_t){.k0 = M->col0, .kn = M->acols, .n0 = 0, .nn = d0, .np = d0, .parts = 1, .owner = M->cols.owner};
  v->split = PAR_GPT_SPLIT_BLOCK;
  v->shape[0] = g.parts * g.nn;
  v->shape[1] = v->ndim > 1 ? g.kn : 0;
  v->block = (par_gpt_block_t){.row0 = g.n0, .col0 = v->ndim > 1 ? g.k0 : 0, .part_rows = g.np, .parts = g.parts,
                               .replica = !g.owner};
}

int gpt_md_prepare(par_gpt_t *m, int B, int T) {
  tpl_mesh_t *M = m->md;
  int64_t rows, row0, R = (int64_t)B * T, A = M->acols, V = m->cfg.vocab;
  int rc, L = m->cfg.layers, nsets = m->cfg.recompute ? 1 : L;
  if ((rc = tpl_prepare(M, B, T, &rows, &row0))) return md_err(m, rc);
  if (R != m->cap_bt) {
    gpt_md_free_acts(m);
    tensor_free(m->tc, &m->act_store), tensor_free(m->tc, &m->ids_store), tensor_free(m->tc, &m->g_store);
    free(m->x), free(m->acts), free(m->host_losses), free(m->host_ids);
    m->cap_bt = m->g_cap = 0;
    m->x = calloc((size_t)L + 1, sizeof *m->x);
    m->acts = calloc((size_t)L, sizeof *m->acts); /* (unused: the blocks' sets are tacts) */
    m->tacts = calloc((size_t)nsets, sizeof *m->tacts);
    m->host_losses = malloc((size_t)rows * sizeof(float));
    m->host_ids = malloc((size_t)R * sizeof(int32_t));
    if (!m->x || !m->acts || !m->tacts || !m->host_losses || !m->host_ids)
      return gpt_seterr(m, STRATA_ENOMEM, "par_gpt: activation tables for %lld tokens", (long long)R);
    int64_t acts_n = (L + 2) * rows * A + 4 * rows + rows * V, ids_n = 2 * R, g_n = 2 * rows * A + rows * V;
    if ((rc = tensor_alloc(m->tc, &m->act_store, TENSOR_F32, m->device, 1, &acts_n)) ||
        (rc = tensor_alloc(m->tc, &m->ids_store, TENSOR_I32, m->device, 1, &ids_n)) ||
        (rc = tensor_alloc(m->tc, &m->g_store, TENSOR_F32, m->device, 1, &g_n)))
      return gpt_seterr(m, rc, "par_gpt: activations for B*T = %lld tokens: %s", (long long)R, tensor_last_error(m->tc));
    for (int k = 0; k < nsets; k++)
      if ((rc = tpl_acts_prepare(M, &m->tacts[k], rows))) return md_err(m, rc);
    m->cap_bt = m->g_cap = R, m->md_rows = rows;
    m->scratch_layer = -1;
  }
  float *p = m->act_store.data;
#define V2(t, r, c) (t) = tensor_view2(p, TENSOR_F32, m->device, (r), (c)), p += (r) * (c)
#define V1(t, r) (t) = tensor_view1(p, TENSOR_F32, m->device, (r)), p += (r)
  for (int l = 0; l <= L; l++) V2(m->x[l], rows, A);
  V2(m->lnf_out, rows, A), V1(m->lnf_mean, rows), V1(m->lnf_rstd, rows), V2(m->logits, rows, V);
  V1(m->losses, rows), V1(m->lse, rows);
  p = m->g_store.data;
  V2(m->dres, rows, A), V2(m->dln, rows, A), V2(m->dlogits, rows, V);
#undef V2
#undef V1
  int32_t *ids = m->ids_store.data;
  m->tokens = tensor_view2(ids, TENSOR_I32, m->device, B, T);
  m->targets = tensor_view2(ids + m->cap_bt, TENSOR_I32, m->device, B, T);
  m->B = B, m->T = T, m->md_row0 = row0;
  return STRATA_OK;
}

/* This rank's sequences of a (B, T) id table. */
static tensor_t my_ids(par_gpt_t *m, const tensor_t *ids) {
  return tensor_view2((int32_t *)ids->data + m->md_row0, TENSOR_I32, m->device, m->md_rows / m->T, m->T);
}

int gpt_md_embed_forward(par_gpt_t *m, tensor_t *out) {
  tensor_t ids = my_ids(m, &m->tokens);
  tensor_t o = tensor_view3(out->data, TENSOR_F32, m->device, m->md_rows / m->T, m->T, m->md->acols);
  int rc = tensor_embedding_forward(m->tc, &o, &ids, &m->wte, &m->wpe);
  return rc ? gpt_tensor_err(m, rc) : STRATA_OK;
}

/* Adds the part of md_embg from `first` (n floats), summed over its
 * replicas, to the gradients at dst (n floats). */
static int replicas_sum(par_gpt_t *m, float *part, int64_t n, tensor_t *dst) {
  tpl_mesh_t *M = m->md;
  int rc;
  for (int a = 0; a < 2; a++)
    if ((rc = tpl_allreduce(M, M->rep[0][a], part, n))) return md_err(m, rc);
  tensor_t g = tensor_view1(part, TENSOR_F32, m->device, n), d = tensor_view1(dst->data, TENSOR_F32, m->device, n);
  rc = tensor_add_forward(m->tc, &d, &d, &g);
  return rc ? gpt_tensor_err(m, rc) : STRATA_OK;
}

int gpt_md_embed_backward(par_gpt_t *m) {
  int64_t A = m->md->acols, V = m->cfg.vocab, Tm = m->cfg.seq;
  tensor_t ids = my_ids(m, &m->tokens);
  tensor_t d = tensor_view3(m->dres.data, TENSOR_F32, m->device, m->md_rows / m->T, m->T, A);
  tensor_t gte = tensor_view2(embg_at(m, 0), TENSOR_F32, m->device, V, A),
           gpe = tensor_view2(embg_at(m, 1), TENSOR_F32, m->device, Tm, A);
  int rc = tensor_embedding_backward(m->tc, &gte, &gpe, &d, &ids); /* (the head's part of wte is there) */
  if (rc) return gpt_tensor_err(m, rc);
  if ((rc = replicas_sum(m, embg_at(m, 0), V * A, &m->dwte))) return rc;
  return replicas_sum(m, embg_at(m, 1), Tm * A, &m->dwpe);
}

static void block_params(par_gpt_t *m, int l, tpl_params_t *P) {
  gpt_block_t *k = &m->blocks[l];
  gpt_param2_t *pairs[6] = {&k->ln1, &k->qkv, &k->proj, &k->ln2, &k->fc, &k->fcproj};
  for (int i = 0; i < 6; i++) {
    P->p[2 * i] = pairs[i]->w, P->p[2 * i + 1] = pairs[i]->b;
    P->g[2 * i] = pairs[i]->dw, P->g[2 * i + 1] = pairs[i]->db;
  }
}

int gpt_md_block_forward(par_gpt_t *m, int l, int set, const tensor_t *x, tensor_t *y) {
  tpl_params_t P;
  block_params(m, l, &P);
  int rc = tpl_block_forward(m->md, &P, &m->tacts[set], y, x, m->T);
  if (rc) return md_err(m, rc);
  m->scratch_layer = l, m->scratch_slot = m->cur;
  return STRATA_OK;
}

/* On entry m->dres = dL/dy; on exit dL/dx. */
int gpt_md_block_backward(par_gpt_t *m, int l, int set, const tensor_t *x) {
  tpl_params_t P;
  block_params(m, l, &P);
  int rc = tpl_block_backward(m->md, &P, &m->tacts[set], &m->dln, &m->dres, x, m->T);
  if (rc) return md_err(m, rc);
  return (rc = tensor_copy(m->tc, &m->dres, &m->dln)) ? gpt_tensor_err(m, rc) : STRATA_OK;
}

/* Targets counted over the whole batch (every rank has it). */
static int64_t targets_counted(const par_gpt_t *m) {
  int64_t R = (int64_t)m->B * m->T, n = 0;
  for (int64_t i = 0; i < R; i++) n += m->host_ids[i] >= 0;
  return n;
}

int gpt_md_head_forward(par_gpt_t *m, const tensor_t *x, int with_loss, float *loss) {
  tpl_mesh_t *M = m->md;
  int64_t rows = m->md_rows;
  int rc;
  if ((rc = tpl_ln_forward(M, &m->lnf_out, &m->lnf_mean, &m->lnf_rstd, x, &m->lnf.w, &m->lnf.b))) return md_err(m, rc);
  if ((rc = tensor_matmul(m->tc, &m->logits, &m->lnf_out, &m->wte, 0, 1, 1.f, 0.f))) return gpt_tensor_err(m, rc);
  if ((rc = tpl_allreduce(M, M->hid, m->logits.data, tensor_numel(&m->logits)))) return md_err(m, rc);
  if (!with_loss) return STRATA_OK;
  tensor_t tg = tensor_view1((int32_t *)m->targets.data + m->md_row0, TENSOR_I32, m->device, rows);
  if ((rc = tensor_xent_forward(m->tc, &m->losses, &m->lse, &m->logits, &tg))) return gpt_tensor_err(m, rc);
  /* the rows' losses to the host (on a device the step's one copy back, as the other layouts'), summed there */
  tensor_t hl = tensor_view1(m->host_losses, TENSOR_F32, TENSOR_CPU, rows);
  if ((rc = tensor_copy(m->tc, &hl, &m->losses))) return gpt_tensor_err(m, rc);
  float sum = 0;
  for (int64_t r = 0; r < rows; r++)
    if (m->host_ids[m->md_row0 + r] >= 0) sum += m->host_losses[r];
  for (int a = 0; a < 2; a++) /* over the ranks that hold the other rows */
    if ((rc = tpl_allreduce(M, M->rep[0][a], &sum, 1))) return md_err(m, rc);
  int64_t n = targets_counted(m);
  *loss = n ? sum / (float)n : 0.f;
  return STRATA_OK;
}

int gpt_md_head_backward(par_gpt_t *m, const tensor_t *x) {
  tpl_mesh_t *M = m->md;
  int64_t rows = m->md_rows, A = M->acols, V = m->cfg.vocab, n = targets_counted(m);
  tensor_t tg = tensor_view1((int32_t *)m->targets.data + m->md_row0, TENSOR_I32, m->device, rows);
  tensor_t gte = tensor_view2(embg_at(m, 0), TENSOR_F32, m->device, V, A);
  int rc;
  if ((rc = tensor_zero(m->tc, &m->md_embg)) || (rc = tensor_zero(m->tc, &m->dlogits)) ||
      (rc = tensor_xent_backward(m->tc, &m->dlogits, &m->logits, &m->lse, &tg, n ? m->loss_scale / (float)n : 0.f)) ||
      (rc = tensor_matmul(m->tc, &m->dln, &m->dlogits, &m->wte, 0, 0, 1.f, 0.f)) ||
      (rc = tensor_matmul(m->tc, &gte, &m->dlogits, &m->lnf_out, 1, 0, 1.f, 1.f)) || (rc = tensor_zero(m->tc, &m->dres)))
    return gpt_tensor_err(m, rc);
  tensor_t dgw = tensor_view1(embg_at(m, 2), TENSOR_F32, m->device, A),
           dgb = tensor_view1(embg_at(m, 3), TENSOR_F32, m->device, A);
  if ((rc = tpl_ln_backward(M, &m->dres, &dgw, &dgb, &m->dln, x, &m->lnf_mean, &m->lnf_rstd, &m->lnf.w)))
    return md_err(m, rc);
  /* the final layernorm's gradients now (its region is complete); wte's with the embedding's */
  if ((rc = replicas_sum(m, embg_at(m, 2), A, &m->lnf.dw))) return rc;
  return replicas_sum(m, embg_at(m, 3), A, &m->lnf.db);
}

int par_gpt_tp_sent(const par_gpt_t *m, uint64_t *sent) {
  if (!m || !m->md || !sent) return STRATA_EINVAL;
  tpl_traffic(m->md, sent, NULL);
  return STRATA_OK;
}
