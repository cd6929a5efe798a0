/* The GPT model's layers and its forward/backward. Each layer is a flat
 * forward/backward pair over libtensor ops (the llm.c pattern); a parallel
 * layout replaces a layer (vocab-parallel embedding and head, column/row
 * parallel linears, sequence-split attention) without touching the rest.
 * Backward keeps one running gradient of the residual stream (m->dres):
 * every block's backward receives dL/d(output) there and leaves dL/d(input). */
#include <math.h>
#include <string.h>

#include "gpt_internal.h"

#define T_(call)                                                                                   \
  do {                                                                                             \
    rc = (call);                                                                                   \
    if (rc != STRATA_OK) {                                                                         \
      gpt_tensor_err(m, rc);                                                                       \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

/* ---- sequence parallelism (Korthikanti et al., arXiv 2205.05198, sec. 4.2.2) ----
 * Each tensor rank holds the residual stream of its chunk of the B T tokens
 * (rows [r R/t, (r+1) R/t) of the flattened batch): the layernorms and the
 * residual adds run on the chunk. Before a column-parallel layer the chunk's
 * layernorm output is all-gathered, after a row-parallel one the partial
 * sums are reduce-scattered (Megatron's g and f, with the bytes of the
 * allreduce they replace). Backward all-gathers the residual's gradient
 * for the row-parallel layers and reduce-scatters the inputs' gradients;
 * the layernorm outputs are gathered again for the weight gradients rather
 * than kept. The layernorms' parameters then get token-partial gradients,
 * summed over the group. */
static int sp_gather(par_gpt_t *m, tensor_t *full, const tensor_t *local) {
  return gpt_tp_allgather(m, full->data, local->data, (size_t)tensor_numel(local), local->dtype);
}
static int sp_scatter(par_gpt_t *m, tensor_t *local, const tensor_t *full) {
  return gpt_tp_reduce_scatter(m, local->data, full->data, (size_t)tensor_numel(local), local->dtype);
}

/* Adds the n token-partial layernorm gradients in m->spg (after the backward
 * of one region), summed over the group, to the parameters' gradients. */
static int sp_ln_grads(par_gpt_t *m, gpt_param2_t **lns, int n) {
  int rc = STRATA_OK;
  int64_t C = m->cfg.hidden;
  tensor_t part = tensor_view1(m->spg.data, TENSOR_F32, m->device, 2 * n * C);
  if ((rc = gpt_tp_allreduce(m, &part))) goto fail;
  for (int i = 0; i < n; i++) {
    tensor_t gw = tensor_view1((float *)m->spg.data + 2 * i * C, TENSOR_F32, m->device, C),
             gb = tensor_view1((float *)m->spg.data + (2 * i + 1) * C, TENSOR_F32, m->device, C);
    T_(tensor_add_forward(m->tc, &lns[i]->dw, &lns[i]->dw, &gw));
    T_(tensor_add_forward(m->tc, &lns[i]->db, &lns[i]->db, &gb));
  }
fail:
  return rc;
}

/* The i-th (w, b) pair of m->spg, zeroed: where a layernorm's backward puts
 * its token-partial gradients. */
static int sp_slot(par_gpt_t *m, int i, tensor_t *dw, tensor_t *db) {
  int64_t C = m->cfg.hidden;
  *dw = tensor_view1((float *)m->spg.data + 2 * i * C, TENSOR_F32, m->device, C);
  *db = tensor_view1((float *)m->spg.data + (2 * i + 1) * C, TENSOR_F32, m->device, C);
  int rc = tensor_zero(m->tc, dw);
  return rc ? rc : tensor_zero(m->tc, db);
}

/* The first vocabulary row of this rank's slice (tensor parallelism). */
static int64_t vocab_lo(const par_gpt_t *m) { return (int64_t)m->tp_rank * (m->cfg.vocab / m->tp_size); }

/* Under tensor parallelism the embedding is vocabulary-parallel: each rank
 * looks up the tokens of its slice (and rank 0 adds the positions), and the
 * sum over the group is the embedding. */
/* The position rows of this rank's tokens: all of them, or under ring
 * self-attention those from ring_rank T on (its tokens' places in the
 * sequence). */
static int ring_rows(par_gpt_t *m, tensor_t *w, const tensor_t *full, int64_t T) {
  *w = *full;
  if (m->ring_size < 2) return STRATA_OK;
  int64_t off = (int64_t)m->ring_rank * T, rows = full->shape[0], C = full->shape[1];
  if ((int64_t)m->ring_size * T > rows)
    return gpt_seterr(m, STRATA_ESHAPE, "ring self-attention: %d ranks x %lld tokens exceed the %lld positions",
                      m->ring_size, (long long)T, (long long)rows);
  *w = tensor_view2(full->data ? (float *)full->data + off * C : NULL, TENSOR_F32, full->device, rows - off, C);
  return STRATA_OK;
}

int gpt_embed_forward(par_gpt_t *m, tensor_t *out, const tensor_t *ids) {
  int rc = STRATA_OK;
  if (m->md) return gpt_md_embed_forward(m, out);
  if (m->tp_size < 2) {
    tensor_t wpe;
    if ((rc = ring_rows(m, &wpe, &m->wpe, ids->shape[1]))) return rc;
    T_(tensor_embedding_forward(m->tc, out, ids, &m->wte, &wpe));
    return rc;
  }
  tensor_t *sum = m->sp ? &m->dfull : out, wpe; /* sequence parallel: reduce-scattered to the chunk */
  if ((rc = ring_rows(m, &wpe, &m->wpe, ids->shape[1]))) return rc;
  T_(tensor_embedding_slice_forward(m->tc, sum, ids, &m->wte, m->tp_rank == 0 ? &wpe : NULL, vocab_lo(m)));
  rc = m->sp ? sp_scatter(m, out, sum) : gpt_tp_allreduce(m, out);
fail:
  return rc;
}

int gpt_embed_backward(par_gpt_t *m, const tensor_t *dout, const tensor_t *ids) {
  int rc = STRATA_OK;
  if (m->md) return gpt_md_embed_backward(m);
  if (m->tp_size < 2) {
    tensor_t dwpe;
    if ((rc = ring_rows(m, &dwpe, &m->dwpe, ids->shape[1]))) return rc;
    T_(tensor_embedding_backward(m->tc, &m->dwte, &dwpe, dout, ids));
  } else if (!m->sp) {
    tensor_t dwpe; /* (ring self-attention: this rank's positions) */
    if ((rc = ring_rows(m, &dwpe, &m->dwpe, ids->shape[1]))) return rc;
    T_(tensor_embedding_slice_backward(m->tc, &m->dwte, &dwpe, dout, ids, vocab_lo(m)));
  } else { /* the whole gradient on every rank: the positions' is then complete on each */
    if ((rc = sp_gather(m, &m->dfull, dout))) goto fail;
    T_(tensor_embedding_slice_backward(m->tc, &m->dwte, &m->dwpe, &m->dfull, ids, vocab_lo(m)));
  }
fail:
  return rc;
}

/* Vocabulary-parallel cross-entropy: each rank's log-sum-exp and target
 * logit over its slice of the logits, gathered (R floats per rank) and
 * summed, combined on every rank into the rows' log-sum-exp, kept in
 * m->lse for backward, and the losses; the full logits never meet on one
 * rank. The gathered slices go to the logits' gradient scratch (unused
 * until backward), so that on a device they stay there (NCCL) and only
 * the R losses come to the host; where that scratch is too small (a
 * vocabulary slice narrower than the group) the host's buffers. host_losses
 * gets the losses. */
static int parallel_xent(par_gpt_t *m) {
  int rc = STRATA_OK, t = m->tp_size;
  tensor_ctx_t *tc = m->tc;
  int64_t R = (int64_t)m->B * m->T;
  T_(tensor_xent_slice_forward(tc, &m->lse, &m->losses, &m->logits, &m->targets, vocab_lo(m)));
  tensor_t hz = tensor_view1(m->host_losses, TENSOR_F32, TENSOR_CPU, R);
  if (tensor_numel(&m->dlogits) >= (int64_t)t * R) {
    tensor_t parts = tensor_view2(m->dlogits.data, TENSOR_F32, m->device, t, R);
    if ((rc = gpt_tp_allgather(m, parts.data, m->lse.data, (size_t)R, TENSOR_F32)) || (rc = gpt_tp_allreduce(m, &m->losses)))
      goto fail;
    T_(tensor_xent_slice_combine(tc, &m->lse, &m->losses, &parts, &m->losses, &m->targets));
    T_(tensor_copy(tc, &hz, &m->losses));
  } else {
    float *lse = m->host_losses + R, *all = lse + R;
    tensor_t hl = tensor_view1(lse, TENSOR_F32, TENSOR_CPU, R), parts = tensor_view2(all, TENSOR_F32, TENSOR_CPU, t, R);
    tensor_t ids = tensor_view1(m->host_ids, TENSOR_I32, TENSOR_CPU, R);
    T_(tensor_copy(tc, &hz, &m->losses));
    T_(tensor_copy(tc, &hl, &m->lse));
    if ((rc = gpt_tp_allgather(m, all, lse, (size_t)R, TENSOR_F32)) || (rc = gpt_tp_allreduce(m, &hz))) goto fail;
    T_(tensor_xent_slice_combine(tc, &hl, &hz, &parts, &hz, &ids));
    T_(tensor_copy(tc, &m->lse, &hl));
  }
fail:
  return rc;
}

/* A row-parallel linear layer (Megatron's g): out = sum over the tensor
 * group of in_r W_r^T, then the (replicated) bias, added once. Without
 * tensor parallelism, the plain linear layer. */
static int row_parallel_forward(par_gpt_t *m, tensor_t *out, const tensor_t *in, const gpt_param2_t *p) {
  int rc = STRATA_OK;
  if (m->tp_size < 2) {
    T_(tensor_linear_forward(m->tc, out, in, &p->w, &p->b));
    return rc;
  }
  T_(tensor_linear_forward(m->tc, out, in, &p->w, NULL));
  if ((rc = gpt_tp_allreduce(m, out))) goto fail;
  T_(tensor_bias_add_forward(m->tc, out, out, &p->b));
fail:
  return rc;
}

/* y = x + proj(attn(qkv(ln1(x)))), then y += fcproj(gelu(fc(ln2(.)))).
 * Under tensor parallelism qkv and fc are column-parallel (this rank's
 * heads and hidden units), proj and fcproj row-parallel. */
static int sp_block_forward(par_gpt_t *m, int l, gpt_acts_t *a, const tensor_t *x, tensor_t *y) {
  int rc = STRATA_OK;
  gpt_block_t *k = &m->blocks[l];
  tensor_ctx_t *tc = m->tc;
  T_(tensor_layernorm_forward(tc, &a->ln1, &a->ln1_mean, &a->ln1_rstd, x, &k->ln1.w, &k->ln1.b, GPT_LN_EPS));
  if ((rc = sp_gather(m, &m->gath, &a->ln1))) goto fail;
  T_(tensor_linear_forward(tc, &a->qkv, &m->gath, &k->qkv.w, &k->qkv.b));
  T_(tensor_attention_forward(tc, &a->atty, &a->lse, &a->qkv, m->cfg.heads / m->tp_size));
  T_(tensor_linear_forward(tc, &m->dfull, &a->atty, &k->proj.w, NULL));
  if ((rc = sp_scatter(m, &m->tmp, &m->dfull))) goto fail;
  T_(tensor_bias_add_forward(tc, &m->tmp, &m->tmp, &k->proj.b));
  T_(tensor_residual_layernorm_forward(tc, &a->res2, &a->ln2, &a->ln2_mean, &a->ln2_rstd, x, &m->tmp, &k->ln2.w,
                                       &k->ln2.b, GPT_LN_EPS));
  if ((rc = sp_gather(m, &m->gath, &a->ln2))) goto fail;
  T_(tensor_linear_act_forward(tc, &a->fch_gelu, &a->fch, &m->gath, &k->fc.w, &k->fc.b, TENSOR_ACT_GELU));
  T_(tensor_linear_forward(tc, &m->dfull, &a->fch_gelu, &k->fcproj.w, NULL));
  if ((rc = sp_scatter(m, &m->tmp, &m->dfull))) goto fail;
  T_(tensor_bias_add_forward(tc, &m->tmp, &m->tmp, &k->fcproj.b));
  T_(tensor_add_forward(tc, y, &a->res2, &m->tmp));
  m->scratch_layer = l, m->scratch_slot = m->cur;
fail:
  return rc;
}

/* On entry m->dres = dL/dy of this rank's tokens; on exit dL/dx. */
static int sp_block_backward(par_gpt_t *m, int l, gpt_acts_t *a, const tensor_t *x) {
  int rc = STRATA_OK;
  gpt_block_t *k = &m->blocks[l];
  tensor_ctx_t *tc = m->tc;
  tensor_t w1, b1, w2, b2;
  T_(sp_slot(m, 0, &w1, &b1));
  T_(sp_slot(m, 1, &w2, &b2));
  if ((rc = sp_gather(m, &m->dfull, &m->dres))) goto fail; /* dL/dy, every token */
  /* fcproj's input gradient straight through the GELU into dfch (dfch_gelu
   * is the op's workspace) */
  T_(tensor_zero(tc, &m->dfch));
  T_(tensor_linear_act_backward(tc, &m->dfch, &m->dfch_gelu, &k->fcproj.dw, &k->fcproj.db, &m->dfull, &a->fch_gelu,
                                &k->fcproj.w, &a->fch, TENSOR_ACT_GELU));
  if ((rc = sp_gather(m, &m->gath, &a->ln2))) goto fail; /* again, for fc's weight gradient */
  T_(tensor_zero(tc, &m->dfull));
  T_(tensor_linear_backward(tc, &m->dfull, &k->fc.dw, &k->fc.db, &m->dfch, &m->gath, &k->fc.w));
  if ((rc = sp_scatter(m, &m->dln, &m->dfull))) goto fail;
  T_(tensor_layernorm_backward(tc, &m->dres, &w2, &b2, &m->dln, &a->res2, &k->ln2.w, &a->ln2_mean, &a->ln2_rstd));
  if ((rc = sp_gather(m, &m->dfull, &m->dres))) goto fail; /* dL/d(res2), every token */
  T_(tensor_zero(tc, &m->datty));
  T_(tensor_linear_backward(tc, &m->datty, &k->proj.dw, &k->proj.db, &m->dfull, &a->atty, &k->proj.w));
  T_(tensor_zero(tc, &m->dqkv));
  T_(tensor_attention_backward(tc, &m->dqkv, &m->datty, &a->qkv, &a->atty, &a->lse, m->cfg.heads / m->tp_size));
  if ((rc = sp_gather(m, &m->gath, &a->ln1))) goto fail;
  T_(tensor_zero(tc, &m->dfull));
  T_(tensor_linear_backward(tc, &m->dfull, &k->qkv.dw, &k->qkv.db, &m->dqkv, &m->gath, &k->qkv.w));
  if ((rc = sp_scatter(m, &m->dln, &m->dfull))) goto fail;
  T_(tensor_layernorm_backward(tc, &m->dres, &w1, &b1, &m->dln, x, &k->ln1.w, &a->ln1_mean, &a->ln1_rstd));
  gpt_param2_t *lns[2] = {&k->ln1, &k->ln2};
  rc = sp_ln_grads(m, lns, 2);
fail:
  return rc;
}

int gpt_block_forward(par_gpt_t *m, int l, gpt_acts_t *a, const tensor_t *x, tensor_t *y) {
  int rc = STRATA_OK;
  gpt_block_t *k = &m->blocks[l];
  tensor_ctx_t *tc = m->tc;
  if (m->md) return gpt_md_block_forward(m, l, m->cfg.recompute ? 0 : l, x, y);
  if (m->sp) return sp_block_forward(m, l, a, x, y);
  T_(tensor_layernorm_forward(tc, &a->ln1, &a->ln1_mean, &a->ln1_rstd, x, &k->ln1.w, &k->ln1.b, GPT_LN_EPS));
  T_(tensor_linear_forward(tc, &a->qkv, &a->ln1, &k->qkv.w, &k->qkv.b));
  if (m->ring_size > 1) { /* the whole sequence's attention, the key blocks passed around the ring */
    if ((rc = gpt_ring_forward(m, a))) goto fail;
  } else {
    T_(tensor_attention_forward(tc, &a->atty, &a->lse, &a->qkv, m->cfg.heads / m->tp_size));
  }
  if ((rc = row_parallel_forward(m, &m->tmp, &a->atty, &k->proj))) goto fail;
  /* The attention's residual and ln_2 in one pass. The block's output
   * (res2 + the MLP's) stays a separate add: the layernorm that reads it is
   * the next region's (ln_1 of the next block, or ln_f), whose parameters
   * are resident only once the hook has heard NEED for that region (ZeRO-3
   * gathers, offload fetches them there). */
  T_(tensor_residual_layernorm_forward(tc, &a->res2, &a->ln2, &a->ln2_mean, &a->ln2_rstd, x, &m->tmp, &k->ln2.w,
                                       &k->ln2.b, GPT_LN_EPS));
  T_(tensor_linear_act_forward(tc, &a->fch_gelu, &a->fch, &a->ln2, &k->fc.w, &k->fc.b, TENSOR_ACT_GELU));
  if ((rc = row_parallel_forward(m, &m->tmp, &a->fch_gelu, &k->fcproj))) goto fail;
  T_(tensor_add_forward(tc, y, &a->res2, &m->tmp));
  m->scratch_layer = l, m->scratch_slot = m->cur;
fail:
  return rc;
}

/* On entry m->dres = dL/dy; on exit dL/dx. The residual paths are the
 * identity, so each layernorm's backward simply accumulates into m->dres. */
int gpt_block_backward(par_gpt_t *m, int l, gpt_acts_t *a, const tensor_t *x) {
  int rc = STRATA_OK;
  gpt_block_t *k = &m->blocks[l];
  tensor_ctx_t *tc = m->tc;
  if (m->md) return gpt_md_block_backward(m, l, m->cfg.recompute ? 0 : l, x);
  if (m->sp) return sp_block_backward(m, l, a, x);
  /* fcproj's input gradient straight through the GELU into dfch (dfch_gelu
   * is the op's workspace) */
  T_(tensor_zero(tc, &m->dfch));
  T_(tensor_linear_act_backward(tc, &m->dfch, &m->dfch_gelu, &k->fcproj.dw, &k->fcproj.db, &m->dres, &a->fch_gelu,
                                &k->fcproj.w, &a->fch, TENSOR_ACT_GELU));
  T_(tensor_zero(tc, &m->dln));
  T_(tensor_linear_backward(tc, &m->dln, &k->fc.dw, &k->fc.db, &m->dfch, &a->ln2, &k->fc.w));
  if ((rc = gpt_tp_allreduce(m, &m->dln))) goto fail; /* Megatron's f: the column-parallel input's gradient */
  T_(tensor_residual_layernorm_backward(tc, &m->dres, &k->ln2.dw, &k->ln2.db, &m->dln, &a->res2, &k->ln2.w,
                                        &a->ln2_mean, &a->ln2_rstd));
  T_(tensor_zero(tc, &m->datty));
  T_(tensor_linear_backward(tc, &m->datty, &k->proj.dw, &k->proj.db, &m->dres, &a->atty, &k->proj.w));
  T_(tensor_zero(tc, &m->dqkv));
  if (m->ring_size > 1) {
    if ((rc = gpt_ring_backward(m, a))) goto fail;
  } else {
    T_(tensor_attention_backward(tc, &m->dqkv, &m->datty, &a->qkv, &a->atty, &a->lse, m->cfg.heads / m->tp_size));
  }
  T_(tensor_zero(tc, &m->dln));
  T_(tensor_linear_backward(tc, &m->dln, &k->qkv.dw, &k->qkv.db, &m->dqkv, &a->ln1, &k->qkv.w));
  if ((rc = gpt_tp_allreduce(m, &m->dln))) goto fail;
  T_(tensor_layernorm_backward(tc, &m->dres, &k->ln1.dw, &k->ln1.db, &m->dln, x, &k->ln1.w,
                               &a->ln1_mean, &a->ln1_rstd));
fail:
  return rc;
}

/* Final layernorm, tied LM head (logits = ln_f(x) wte^T), cross-entropy. */
int gpt_head_forward(par_gpt_t *m, const tensor_t *x, int with_loss, float *loss) {
  int rc = STRATA_OK;
  tensor_ctx_t *tc = m->tc;
  if (m->md) return gpt_md_head_forward(m, x, with_loss, loss);
  if (m->sp) { /* on this rank's tokens, then gathered for the vocabulary-parallel head */
    T_(tensor_layernorm_forward(tc, &m->tmp, &m->lnf_mean, &m->lnf_rstd, x, &m->lnf.w, &m->lnf.b, GPT_LN_EPS));
    if ((rc = sp_gather(m, &m->lnf_out, &m->tmp))) goto fail;
  } else {
    T_(tensor_layernorm_forward(tc, &m->lnf_out, &m->lnf_mean, &m->lnf_rstd, x, &m->lnf.w, &m->lnf.b,
                                GPT_LN_EPS));
  }
  int64_t R = (int64_t)m->B * m->T;
  /* Fused (opts.head_chunk): the loss and lse chunk by chunk, no logits
   * kept; backward computes each chunk's logits again rather than keep
   * them (one more head GEMM, 2 V h FLOPs a token) or keep the gradients
   * it would have to accumulate into dwte before backward is asked for. */
  if (m->fused_head && with_loss) {
    m->logits.data = NULL;
    T_(tensor_classifier_xent(tc, &m->losses, &m->lse, NULL, NULL, &m->lnf_out, &m->wte, &m->targets, 0.f,
                              m->head_chunk));
    tensor_t hl = tensor_view1(m->host_losses, TENSOR_F32, TENSOR_CPU, R);
    tensor_t dl = tensor_view1(m->losses.data, TENSOR_F32, m->device, R);
    T_(tensor_copy(tc, &hl, &dl));
    goto mean;
  }
  if (m->fused_head) { /* the whole logits, asked for: in their own store */
    int64_t need = R * m->cfg.vocab;
    if (!m->logits_store.data || tensor_numel(&m->logits_store) < need) {
      tensor_free(tc, &m->logits_store);
      T_(tensor_alloc(tc, &m->logits_store, TENSOR_F32, m->device, 1, &need));
    }
    m->logits.data = m->logits_store.data;
  }
  T_(tensor_linear_forward(tc, &m->logits, &m->lnf_out, &m->wte, NULL));
  if (!with_loss) goto fail;
  if (m->tp_size > 1) {
    if ((rc = parallel_xent(m))) goto fail;
  } else {
    T_(tensor_xent_forward(tc, &m->losses, &m->lse, &m->logits, &m->targets));
    tensor_t hl = tensor_view1(m->host_losses, TENSOR_F32, TENSOR_CPU, R);
    tensor_t dl = tensor_view1(m->losses.data, TENSOR_F32, m->device, R);
    T_(tensor_copy(tc, &hl, &dl));
  }
mean:;
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < R; i++)
    if (m->host_ids[i] >= 0) sum += m->host_losses[i], count++;
  *loss = count ? (float)(sum / count) : 0.f;
fail:
  return rc;
}

/* The unfused head's GEMM backward from the f32 logits' gradient: din +=
 * dlogits wte, dwte += dlogits^T ln_f. With 16-bit activations (the head
 * unfused under tensor parallelism) the GEMM runs on f32 copies, ln_f's
 * output cast to m->hx and the input gradient computed in m->dhx, then
 * rounded once into din (which the callers zero: din = dhx). */
static int head_input_backward(par_gpt_t *m, tensor_t *din) {
  tensor_ctx_t *tc = m->tc;
  if (din->dtype == TENSOR_F32) return tensor_linear_backward(tc, din, &m->dwte, NULL, &m->dlogits, &m->lnf_out, &m->wte);
  int rc;
  if ((rc = tensor_cast(tc, &m->hx, &m->lnf_out)) || (rc = tensor_zero(tc, &m->dhx)) ||
      (rc = tensor_linear_backward(tc, &m->dhx, &m->dwte, NULL, &m->dlogits, &m->hx, &m->wte)))
    return rc;
  return tensor_cast(tc, din, &m->dhx);
}

int gpt_head_backward(par_gpt_t *m, const tensor_t *x) {
  int rc = STRATA_OK;
  tensor_ctx_t *tc = m->tc;
  if (m->md) return gpt_md_head_backward(m, x);
  int64_t R = (int64_t)m->B * m->T, count = 0;
  for (int64_t i = 0; i < R; i++) count += m->host_ids[i] >= 0;
  float dloss = count ? m->loss_scale / (float)count : 0.f;
  if (m->fused_head) { /* each chunk's logits again, their gradient in place, dh and dwte */
    T_(tensor_zero(tc, &m->dln));
    T_(tensor_classifier_xent(tc, NULL, &m->lse, &m->dln, &m->dwte, &m->lnf_out, &m->wte, &m->targets, dloss,
                              m->head_chunk));
    T_(tensor_zero(tc, &m->dres));
    T_(tensor_layernorm_backward(tc, &m->dres, &m->lnf.dw, &m->lnf.db, &m->dln, x, &m->lnf.w, &m->lnf_mean,
                                 &m->lnf_rstd));
    goto fail;
  }
  T_(tensor_zero(tc, &m->dlogits));
  if (m->tp_size > 1) T_(tensor_xent_slice_backward(tc, &m->dlogits, &m->logits, &m->lse, &m->targets, dloss, vocab_lo(m)));
  else T_(tensor_xent_backward(tc, &m->dlogits, &m->logits, &m->lse, &m->targets, dloss));
  if (m->sp) {
    tensor_t w, b;
    gpt_param2_t *lns[1] = {&m->lnf};
    T_(sp_slot(m, 0, &w, &b));
    T_(tensor_zero(tc, &m->dfull));
    T_(head_input_backward(m, &m->dfull));
    if ((rc = sp_scatter(m, &m->dln, &m->dfull))) goto fail;
    T_(tensor_zero(tc, &m->dres));
    T_(tensor_layernorm_backward(tc, &m->dres, &w, &b, &m->dln, x, &m->lnf.w, &m->lnf_mean, &m->lnf_rstd));
    rc = sp_ln_grads(m, lns, 1);
    goto fail;
  }
  T_(tensor_zero(tc, &m->dln));
  T_(head_input_backward(m, &m->dln));
  if ((rc = gpt_tp_allreduce(m, &m->dln))) goto fail; /* the head is column-parallel over the vocabulary */
  T_(tensor_zero(tc, &m->dres));
  T_(tensor_layernorm_backward(tc, &m->dres, &m->lnf.dw, &m->lnf.db, &m->dln, x, &m->lnf.w,
                               &m->lnf_mean, &m->lnf_rstd));
fail:
  return rc;
}

/* ---- the model ---- */

static gpt_acts_t *acts_of(par_gpt_t *m, int l) { return &m->acts[m->cfg.recompute ? 0 : l]; }

/* Tells the hook (par_gpt_set_hook) about region r. */
static int hook(par_gpt_t *m, par_gpt_event_t ev, int r, int backward) {
  if (!m->hook) return STRATA_OK;
  int rc = m->hook(m->hook_ctx, ev, r, backward);
  if (rc != STRATA_OK) {
    static const char *const names[] = {"NEED", "DONE", "GRADS"};
    return gpt_seterr(m, rc, "par_gpt: the hook refused %s of region %d in the %s", names[ev], r,
                      backward ? "backward" : "forward");
  }
  return STRATA_OK;
}

/* Partitioned checkpoints: keeps this rank's rows of a block's whole input. */
static int part_keep(par_gpt_t *m, tensor_t *keep, const tensor_t *whole) {
  int64_t n = tensor_numel(keep);
  size_t es = tensor_dtype_size(whole->dtype);
  tensor_t rows = tensor_view1((char *)whole->data + (size_t)((int64_t)m->tp_rank * n) * es, whole->dtype, m->device, n);
  tensor_t dst = tensor_view1(keep->data, keep->dtype, m->device, n);
  int rc = tensor_copy(m->tc, &dst, &rows);
  return rc ? gpt_tensor_err(m, rc) : STRATA_OK;
}

/* Forward of blocks [l0, l1) of the slot in use (prepared; tokens and
 * targets in place; x[l0] filled unless l0 = 0). The hook hears: NEED 0
 * when embedding; NEED, DONE of each block; with the head NEED L+1 (and
 * NEED 0 when not embedding: the tied head reads wte), DONE L+1, DONE 0;
 * DONE 0 after the blocks when embedding without the head. */
static int run_forward(par_gpt_t *m, int l0, int l1, int with_targets, float *loss) {
  int rc, L = m->cfg.layers, embed = l0 == 0, head = l1 == L;
  /* partitioned checkpoints: whole inputs in xa / xb, each block's rows kept in x[l] */
  tensor_t *in = m->part ? &m->xa : &m->x[l0];
  if (embed && ((rc = hook(m, PAR_GPT_NEED, 0, 0)) || (rc = gpt_embed_forward(m, in, &m->tokens)))) return rc;
  for (int l = l0; l < l1; l++) {
    tensor_t *out = !m->part || l == l1 - 1 ? &m->x[l + 1] : in == &m->xa ? &m->xb : &m->xa;
    if ((rc = hook(m, PAR_GPT_NEED, l + 1, 0)) || (rc = gpt_block_forward(m, l, acts_of(m, l), in, out)) ||
        (m->part && (rc = part_keep(m, &m->x[l], in))) || (rc = hook(m, PAR_GPT_DONE, l + 1, 0)))
      return rc;
    in = out;
  }
  if (head && ((rc = hook(m, PAR_GPT_NEED, L + 1, 0)) || (!embed && (rc = hook(m, PAR_GPT_NEED, 0, 0))) ||
               (rc = gpt_head_forward(m, &m->x[L], with_targets, loss)) || (rc = hook(m, PAR_GPT_DONE, L + 1, 0))))
    return rc;
  if (embed || head) return hook(m, PAR_GPT_DONE, 0, 0);
  return STRATA_OK;
}

/* Backward of blocks [l0, l1) of the slot in use (m->dres = dL/dx[l1]
 * unless l1 = L); leaves dL/dx[l0] in m->dres. The hook hears: with the
 * head NEED L+1, NEED 0, GRADS L+1, DONE L+1 (and GRADS 0, DONE 0 when not
 * embedding: the head's part of wte is complete); NEED, GRADS, DONE of each
 * block from the last; when embedding (NEED 0 without the head) GRADS 0,
 * DONE 0. */
static int run_backward(par_gpt_t *m, int l0, int l1) {
  int rc, L = m->cfg.layers, embed = l0 == 0, head = l1 == L;
  if (head && ((rc = hook(m, PAR_GPT_NEED, L + 1, 1)) || (rc = hook(m, PAR_GPT_NEED, 0, 1)) ||
               (rc = gpt_head_backward(m, &m->x[L])) || (rc = hook(m, PAR_GPT_GRADS, L + 1, 1)) ||
               (rc = hook(m, PAR_GPT_DONE, L + 1, 1))))
    return rc;
  if (head && !embed && ((rc = hook(m, PAR_GPT_GRADS, 0, 1)) || (rc = hook(m, PAR_GPT_DONE, 0, 1)))) return rc;
  for (int l = l1 - 1; l >= l0; l--) {
    if ((rc = hook(m, PAR_GPT_NEED, l + 1, 1))) return rc;
    /* With recompute only the block inputs were kept: rebuild this block's
     * activations (its output is rewritten with the same values) unless
     * the scratch set still holds them. Partitioned, the input's rows are
     * gathered first (into xa; the output goes to xb). */
    tensor_t *x = &m->x[l], *y = &m->x[l + 1];
    if (m->part) {
      if ((rc = gpt_tp_allgather(m, m->xa.data, x->data, (size_t)tensor_numel(x), x->dtype))) return rc;
      x = &m->xa, y = &m->xb;
    }
    if (m->cfg.recompute && (m->scratch_layer != l || m->scratch_slot != m->cur))
      if ((rc = gpt_block_forward(m, l, acts_of(m, l), x, y))) return rc;
    if ((rc = gpt_block_backward(m, l, acts_of(m, l), x)) || (rc = hook(m, PAR_GPT_GRADS, l + 1, 1)) ||
        (rc = hook(m, PAR_GPT_DONE, l + 1, 1)))
      return rc;
  }
  if (embed && ((!head && (rc = hook(m, PAR_GPT_NEED, 0, 1))) || (rc = gpt_embed_backward(m, &m->dres, &m->tokens)) ||
                (rc = hook(m, PAR_GPT_GRADS, 0, 1)) || (rc = hook(m, PAR_GPT_DONE, 0, 1))))
    return rc;
  return STRATA_OK;
}

static int chunk_range(par_gpt_t *m, const char *fn, int slot, int chunk, int *l0, int *l1) {
  if (slot < 0 || slot >= m->nslots || chunk < 0 || chunk >= m->interleave)
    return gpt_seterr(m, STRATA_EINVAL, "%s: slot %d of %d, chunk %d of %d", fn, slot, m->nslots, chunk,
                      m->interleave);
  *l0 = (chunk * m->stages + m->stage) * m->chunk_layers;
  *l1 = *l0 + m->chunk_layers;
  return STRATA_OK;
}

int par_gpt_stage_chunk(const par_gpt_t *m, int chunk, int *first, int *count, int *embeds, int *loss) {
  if (!m || chunk < 0 || chunk >= m->interleave) return STRATA_EINVAL;
  int l0 = (chunk * m->stages + m->stage) * m->chunk_layers;
  if (first) *first = l0;
  if (count) *count = m->chunk_layers;
  if (embeds) *embeds = l0 == 0;
  if (loss) *loss = l0 + m->chunk_layers == m->cfg.layers;
  return STRATA_OK;
}

int par_gpt_stage_forward(par_gpt_t *m, int slot, int chunk, const int32_t *tokens, const int32_t *targets, int B,
                          int T, float *loss) {
  int rc = STRATA_OK, l0 = 0, l1 = 0;
  if (!m) return STRATA_EINVAL;
  if ((rc = chunk_range(m, "par_gpt_stage_forward", slot, chunk, &l0, &l1))) return rc;
  gpt_use_slot(m, slot);
  m->have_targets = 0;
  int embed = l0 == 0, head = l1 == m->cfg.layers;
  if (!head) targets = NULL;
  if (loss) *loss = NAN;
  if ((embed && !tokens) || B < 1 || T < 1 || T > m->cfg.seq || (targets && !loss)) {
    rc = gpt_seterr(m, STRATA_EINVAL,
                    "par_gpt_forward: tokens %p, targets %p, loss %p, B %d, T %d (1 <= T <= seq %d)",
                    (const void *)tokens, (const void *)targets, (void *)loss, B, T, m->cfg.seq);
    goto fail;
  }
  int64_t R = (int64_t)B * T;
  for (int64_t i = 0; i < R; i++) {
    if (embed && (tokens[i] < 0 || tokens[i] >= m->cfg.vocab)) {
      rc = gpt_seterr(m, STRATA_EINVAL, "par_gpt_forward: tokens[%lld] = %d outside [0, %d)",
                      (long long)i, tokens[i], m->cfg.vocab);
      goto fail;
    }
    if (targets && targets[i] >= m->cfg.vocab) {
      rc = gpt_seterr(m, STRATA_EINVAL, "par_gpt_forward: targets[%lld] = %d >= vocab %d",
                      (long long)i, targets[i], m->cfg.vocab);
      goto fail;
    }
  }
  if ((rc = gpt_prepare(m, B, T))) goto fail;
  tensor_t h = tensor_view2((void *)tokens, TENSOR_I32, TENSOR_CPU, B, T);
  if (embed) T_(tensor_copy(m->tc, &m->tokens, &h));
  if (targets) {
    memcpy(m->host_ids, targets, (size_t)R * sizeof(int32_t));
    h.data = (void *)targets;
    T_(tensor_copy(m->tc, &m->targets, &h));
  }
  if ((rc = run_forward(m, l0, l1, targets != NULL, loss))) goto fail;
  m->have_targets = !head || targets != NULL;
fail:
  return rc;
}

int par_gpt_stage_backward(par_gpt_t *m, int slot, int chunk) {
  int rc, l0 = 0, l1 = 0;
  if (!m) return STRATA_EINVAL;
  if ((rc = chunk_range(m, "par_gpt_stage_backward", slot, chunk, &l0, &l1))) return rc;
  gpt_use_slot(m, slot);
  if (!m->have_targets)
    return gpt_seterr(m, STRATA_ESTATE, "par_gpt_backward: no forward with targets to differentiate");
  return run_backward(m, l0, l1);
}

void *par_gpt_stage_buffer(par_gpt_t *m, int slot, int chunk, par_gpt_io_t which, int B, int T, size_t *count) {
  int l0 = 0, l1 = 0;
  if (count) *count = 0;
  if (!m || chunk_range(m, "par_gpt_stage_buffer", slot, chunk, &l0, &l1) || B < 1 || T < 1 || T > m->cfg.seq)
    return NULL;
  int L = m->cfg.layers;
  if ((which == PAR_GPT_IN || which == PAR_GPT_DIN) && l0 == 0) return NULL;
  if ((which == PAR_GPT_OUT || which == PAR_GPT_DOUT) && l1 == L) return NULL;
  gpt_use_slot(m, slot);
  if (gpt_prepare(m, B, T)) return NULL;
  const tensor_t *t = which == PAR_GPT_IN ? (m->part ? &m->xa : &m->x[l0]) : which == PAR_GPT_OUT ? &m->x[l1] : &m->dres;
  if (count) *count = (size_t)tensor_numel(t);
  return t->data;
}

int par_gpt_act_dtype(const par_gpt_t *m) { return m ? (int)m->act_dtype : TENSOR_F32; }

/* The whole model: chunk 0 of the single stage, slot 0. */
static int whole(par_gpt_t *m, const char *fn) {
  if (m->stages > 1 || m->interleave > 1)
    return gpt_seterr(m, STRATA_EINVAL, "%s: the model is pipeline stage %d of %d: use par_gpt_stage_forward/backward",
                      fn, m->stage, m->stages);
  return STRATA_OK;
}

int par_gpt_forward(par_gpt_t *m, const int32_t *tokens, const int32_t *targets, int B, int T, float *loss) {
  if (!m) return STRATA_EINVAL;
  int rc = whole(m, "par_gpt_forward");
  if (rc) return rc;
  if (!tokens) return gpt_seterr(m, STRATA_EINVAL, "par_gpt_forward: tokens NULL");
  return par_gpt_stage_forward(m, 0, 0, tokens, targets, B, T, loss);
}

int par_gpt_backward(par_gpt_t *m) {
  if (!m) return STRATA_EINVAL;
  int rc = whole(m, "par_gpt_backward");
  return rc ? rc : par_gpt_stage_backward(m, 0, 0);
}
