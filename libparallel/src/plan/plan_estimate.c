/* The cost model: memory per device by category and time per step by
 * component for a GPT, a layout and a cluster. docs/planner.md derives every
 * term; the comments here give the source of each. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan_internal.h"

static const par_plan_params_t default_params = PAR_PLAN_PARAMS_DEFAULTS;

const par_plan_params_t *plan_params_or_default(const par_plan_params_t *p) {
  return p ? p : &default_params;
}

/* ------------------------------------------------------------ collectives */

void plan_group_link(const par_cluster_t *c, const par_plan_params_t *p, int stride, int size,
                     plan_link_t *out) {
  int g = c->gpus_per_node;
  /* Ranks are laid out tp innermost, then sp, dp, pp (the mesh order of
   * libcomm: tensor slicing inside a node, pipeline stages across nodes). A
   * group of `size` ranks `stride` apart has k members per node. */
  int k = stride >= g ? 1 : g / stride;
  if (k > size) k = size;
  if (k < 1) k = 1;
  out->size = size;
  if (size <= 1) {
    out->bw = INFINITY;
    out->lat = 0.0;
    out->inter = 0;
  } else if (k >= size) {
    out->bw = c->intra_bw * p->link_efficiency;
    out->lat = c->intra_lat;
    out->inter = 0;
  } else {
    /* The node's NICs are shared by the g / k groups that cross nodes at the
     * same moment; one ring per NIC (NCCL), so a group gets k NICs' worth. */
    double share = c->inter_bw * (double)k / (double)g;
    out->bw = fmin(share, c->intra_bw) * p->link_efficiency;
    out->lat = c->inter_lat;
    out->inter = 1;
  }
}

/* Ring allreduce 2(N-1) alpha + 2 (N-1)/N n beta, or a (double binary) tree
 * 2 log2(N) alpha + 2 n beta, whichever is faster (NCCL picks likewise). */
double plan_allreduce_time(const plan_link_t *k, double bytes) {
  double n = k->size;
  if (n <= 1 || bytes <= 0) return 0.0;
  double ring = 2.0 * (n - 1) * k->lat + 2.0 * (n - 1) / n * bytes / k->bw;
  double tree = 2.0 * ceil(log2(n)) * k->lat + 2.0 * bytes / k->bw;
  return fmin(ring, tree);
}

/* Ring reduce-scatter or allgather of `bytes` in total: (N-1) alpha + (N-1)/N n beta. */
double plan_gather_time(const plan_link_t *k, double bytes) {
  double n = k->size;
  if (n <= 1 || bytes <= 0) return 0.0;
  return (n - 1) * k->lat + (n - 1) / n * bytes / k->bw;
}

static double p2p_time(const plan_link_t *k, double bytes) {
  if (k->size <= 1 || bytes <= 0) return 0.0;
  return k->lat + bytes / k->bw;
}

/* Bytes each device sends for one linear layer, forward + backward, with
 * input width hin and output width hout, M = rows x width activation bytes
 * and W = hin x hout weight bytes (the Colossal-AI accounting, see
 * plan_tp_linear_terms). */
double plan_tp_linear_bytes(par_tp_mode_t mode, int tp, int depth, double rows, double hin,
                              double hout, double e) {
  double min_ = rows * hin * e, mout = rows * hout * e, w = hin * hout * e;
  double mm = fmax(min_, mout);
  switch (mode) {
  case PAR_TP_1D: {
    /* Megatron: one allreduce of the h-wide activation (forward for
     * row-parallel, backward for column-parallel layers). */
    double t = tp;
    return 2.0 * (t - 1) / t * rows * fmin(hin, hout) * e;
  }
  case PAR_TP_2D: {
    double q = sqrt((double)tp);
    return 3.0 * (q - 1) / (q * q) * (mm + w);
  }
  case PAR_TP_2P5D: {
    double d = depth, q = sqrt((double)tp / d);
    return 3.0 * (q - 1) / (q * q) * (mm / d + w);
  }
  case PAR_TP_3D: {
    double q = cbrt((double)tp);
    return 2.0 * (q - 1) / (q * q * q) * (min_ + w + mout);
  }
  }
  return 0.0;
}

double par_plan_tp_linear_sent(par_tp_mode_t mode, int tp, int depth, double rows, double hin, double hout,
                               double e) {
  switch (mode) {
  case PAR_TP_1D: /* one allreduce of the narrower activation (forward or backward) */
    return plan_tp_linear_bytes(mode, tp, depth, rows, hin, hout, e);
  case PAR_TP_2D:
  case PAR_TP_2P5D: {
    double d = mode == PAR_TP_2D ? 1.0 : depth, q = llround(sqrt((double)tp / d));
    double x = rows * hin * e / (d * q * q), w = hin * hout * e / (q * q);
    /* forward: root of one broadcast of X and one of W; backward: the same
     * two broadcasts and q reductions each of X-sized and W-sized partial
     * products ((q - 1)/q of a block as a root, the block otherwise); 2.5D
     * adds the allreduce of the weight's gradient over the depth */
    double summa = q > 1 ? (2.0 + (q - 1) * (q + 1) / q) * (x + w) : 0.0;
    return summa + 2.0 * (d - 1) / d * w;
  }
  case PAR_TP_3D: {
    double q = llround(cbrt((double)tp)), a = rows * hin * e / (q * q), b = hin * hout * e / (q * q),
           c = rows * hout * e / (q * q);
    /* forward: X and W all-gathered, Y reduce-scattered; backward: X, W and
     * dY all-gathered, dX and dW reduce-scattered */
    return (q - 1) / q * (3.0 * a + 3.0 * b + 2.0 * c);
  }
  }
  return 0.0;
}

int plan_tp_q(const par_layout_t *l) {
  switch (l->tp_mode) {
  case PAR_TP_2D: return (int)llround(sqrt((double)l->tp));
  case PAR_TP_2P5D: return (int)llround(sqrt((double)l->tp / l->tp_depth));
  case PAR_TP_3D: return (int)llround(cbrt((double)l->tp));
  default: return l->tp;
  }
}

/* Messages (latency terms) per linear layer, forward + backward. */
static double tp_linear_msgs(par_tp_mode_t mode, int tp, int depth) {
  switch (mode) {
  case PAR_TP_1D: return 2.0 * (tp - 1);
  case PAR_TP_2D: return 6.0 * sqrt((double)tp);
  case PAR_TP_2P5D: return 6.0 * sqrt((double)tp / depth);
  case PAR_TP_3D: return 6.0 * (cbrt((double)tp) - 1);
  }
  return 0.0;
}

/* ------------------------------------------------------------------ memory */

/* n elements in nd shards of a multiple of `align` elements each, all
 * ranks' together (align 0: n). */
static double plan_sharded(double n, double nd, double align) {
  return align > 0 ? nd * align * ceil(ceil(n / nd) / align) : n;
}

typedef struct {
  double params;      /* parameters held by this stage's tensor shard */
  double mem[PAR_MEM_COUNT];
  double total;
  double host;        /* bytes this device keeps on the host */
  double nvme;        /* bytes this device keeps on NVMe */
} stage_mem_t;

/* Blocks on the heaviest pipeline stage: ceil(l / p) (an uneven split puts
 * the extra blocks on some stages; the planner assumes the worst, that the
 * embedding's and the head's stage are among them). */
static double stage_layers(const par_gpt_config_t *m, const par_layout_t *l) {
  return ceil((double)m->layers / l->pp);
}

/* Bytes of one block's kept input per microbatch with recompute (the
 * checkpoint): tok h e, split over the tensor group where the layout splits
 * it (2d/2.5d/3d, Megatron's sequence parallelism, DeepSpeed's partitioned
 * checkpoints). */
static double checkpoint_bytes(const par_gpt_config_t *m, const par_layout_t *l, const par_plan_params_t *p) {
  int mixed = l->precision != PAR_PREC_FP32, oned = l->tp_mode == PAR_TP_1D;
  double e = p->act_elem_bytes > 0 ? p->act_elem_bytes : mixed ? 2.0 : 4.0;
  double tok = (double)l->microbatch * m->seq / l->sp;
  int seqpar = oned && l->seq_parallel && l->tp > 1;
  int whole_input = oned && !seqpar && !l->partition_activations;
  return tok * m->hidden * e / (whole_input ? 1.0 : (double)l->tp);
}

/* Gathered parameters DeepSpeed's ZeRO-3 keeps on a device, in elements of
 * this rank's tensor slice (deepspeed/runtime/zero/partitioned_param_coordinator.py):
 * tensors of at most zero3_persist_elems elements are never partitioned
 * (*persist, whole on every rank); of the others, at the turn from forward to
 * backward, those used again within zero3_reuse_elems elements of the trace
 * stay gathered (the last reuse / 2 elements of the forward, reuse / 3 with
 * recompute, whose backward runs each block's forward again), the module in
 * use is gathered (at least the largest tensor) and up to zero3_prefetch_elems
 * more are prefetched while the gathered total stays under
 * zero3_max_live_elems (the loop stops after the tensor that crosses the
 * bucket, so up to one tensor more). */
static double deepspeed_gathered(const par_gpt_config_t *m, const par_layout_t *l, const par_plan_params_t *p,
                                 int first, int last, double ls, double pdiv, double params, double *persist) {
  double h = m->hidden, s = m->seq, v = m->vocab, T = p->zero3_persist_elems;
  double r = l->tp_mode == PAR_TP_1D ? 1.0 : pdiv; /* 1d keeps layernorms and row biases whole */
  const double blk[12] = {h / r, h / r, 3 * h * h / pdiv, 3 * h / pdiv, h * h / pdiv, h / r,
                          h / r, h / r, 4 * h * h / pdiv, 4 * h / pdiv, 4 * h * h / pdiv, h / r};
  double small = 0, leaf = 0;
  for (int i = 0; i < 12; i++) {
    if (blk[i] <= T) small += blk[i];
    else leaf = fmax(leaf, blk[i]);
  }
  small *= ls;
  double ends[4] = {first ? v * h / pdiv : 0, first ? s * h : 0, last ? 2 * h : 0,
                    last && !first ? v * h / pdiv : 0};
  for (int i = 0; i < 4; i++) {
    if (ends[i] <= 0) continue;
    if (ends[i] <= T) small += ends[i]; /* (the final layernorm's 2h counts as one tensor) */
    else leaf = fmax(leaf, ends[i]);
  }
  *persist = small;
  double big = params - small;
  double retained = fmin(big, p->zero3_reuse_elems / (m->recompute ? 3.0 : 2.0));
  double prefetch = fmin(p->zero3_prefetch_elems, fmax(0.0, p->zero3_max_live_elems - retained));
  double live = fmax(retained, leaf) + (prefetch > 0 ? prefetch + leaf : 0.0);
  return fmin(live, big);
}

static void stage_memory(const par_gpt_config_t *m, const par_layout_t *l, const par_plan_params_t *p,
                         int first, int last, int microbatches, stage_mem_t *out) {
  memset(out, 0, sizeof *out);
  double h = m->hidden, s = m->seq, v = m->vocab, a = m->heads;
  double ls = stage_layers(m, l);
  int oned = l->tp_mode == PAR_TP_1D;
  /* Matrices split over tp (2.5d: over q^2, replicated over the depth). */
  double pdiv = l->tp_mode == PAR_TP_2P5D ? (double)l->tp / l->tp_depth : (double)l->tp;
  /* 1d keeps layernorms and row-parallel biases whole (Megatron); the other
   * modes partition every tensor of a block. */
  double block = (12.0 * h * h + 7.0 * h) / pdiv + 6.0 * h / (oned ? 1.0 : pdiv);
  double params = ls * block;
  if (first) params += v * h / pdiv + s * h;            /* vocab-parallel + positions */
  if (last) params += 2.0 * h + (first ? 0.0 : v * h / pdiv); /* final LN; tied copy */
  out->params = params;

  /* Model states (arXiv 1910.02054 sec. 5): mixed precision keeps 2-byte
   * parameters and gradients and K = 12 bytes of fp32 master + Adam moments;
   * fp32 training keeps 4 + 4 and K = 8 (the moments). Replicas that hold
   * the same parameters (dp x sp) shard them under ZeRO. */
  int mixed = l->precision != PAR_PREC_FP32;
  double wb = mixed ? 2.0 : 4.0, k = mixed ? 12.0 : 8.0;
  double nd = (double)l->dp * l->sp;
  double pshard = l->zero_stage >= 3 ? nd : 1.0;
  double gshard = l->zero_stage >= 2 ? nd : 1.0;
  double oshard = l->zero_stage >= 1 ? nd : 1.0;
  /* Without pipeline splits, the elements the engine holds: it shards each
   * region of the model (the embeddings, each block, the final layernorm;
   * under Megatron's 1d, this rank's tensor slice of each) in nd equal
   * shards of a multiple of shard_align elements, padding the region's end
   * (libparallel/src/dist/state.c). */
  double held = params;
  if (!oned && l->tp > 1) { /* strata's 2D, 2.5D and 3D blocks, padded to the shards as below */
    double r0, blk, rl, al = p->shard_align;
    plan_md_regions(m, l, &r0, &blk, &rl);
    out->params = params = (first || last ? r0 : 0.0) + ls * blk + (last ? rl : 0.0);
    held = (first || last ? plan_sharded(r0, nd, al) : 0.0) + ls * plan_sharded(blk, nd, al) +
           (last ? plan_sharded(rl, nd, al) : 0.0);
  } else if (l->tp == 1 || oned) { /* the engine's regions, each rank's tensor slice of them (the last
                               pipeline stage holds the whole embedding region for the tied head) */
    double r0 = v * h / l->tp + s * h, blk = (12.0 * h * h + 7.0 * h) / l->tp + 6.0 * h, rl = 2.0 * h;
    double al = p->shard_align;
    held = (first || last ? plan_sharded(r0, nd, al) : 0.0) + ls * plan_sharded(blk, nd, al) +
           (last ? plan_sharded(rl, nd, al) : 0.0);
  }
  double pbytes = held * wb / pshard, gbytes = held * wb / gshard, obytes = held * k / oshard;
  double off[3] = {0, 0, 0}; /* host, nvme bytes */
  if (l->offload_params == PAR_TIER_DEVICE) out->mem[PAR_MEM_PARAMS] = pbytes;
  else off[l->offload_params] += pbytes;
  if (l->offload_gradients == PAR_TIER_DEVICE) out->mem[PAR_MEM_GRADS] = gbytes;
  else off[l->offload_gradients] += gbytes;
  if (l->offload_optimizer == PAR_TIER_DEVICE) {
    out->mem[PAR_MEM_OPTIM] = obytes;
  } else {
    off[l->offload_optimizer] += obytes;
    /* fp32 runs too keep an fp32 copy of the parameters beside m and v:
     * the host's update writes it and sends it to the device, whose own
     * parameters the CPU cannot update in place (strata's engine on a
     * device, state.c). */
    if (!mixed) off[l->offload_optimizer] += held * 4.0 / oshard;
    /* The host update reads a gradient copy (ZeRO-Offload keeps fp16
     * gradients on the CPU) unless the gradients live there already. */
    if (l->offload_gradients == PAR_TIER_DEVICE) off[PAR_TIER_CPU] += held * wb / oshard;
  }
  out->host = off[PAR_TIER_CPU];
  out->nvme = off[PAR_TIER_NVME];

  /* Activations per layer per microbatch (Korthikanti et al., arXiv
   * 2205.05198 eq. 1-2, generalised to e bytes per element and 1-byte
   * dropout masks): s b h (16 e + 2) + a s^2 b (2 e + 1). Megatron's 1d
   * splits 12 e of the 16 e and the attention scores over t; 2d/2.5d/3d
   * split all of it over tp (Colossal-AI); sequence parallelism over sp. */
  double e = p->act_elem_bytes > 0 ? p->act_elem_bytes : mixed ? 2.0 : 4.0, mk = p->mask_bytes;
  double tok = (double)l->microbatch * s / l->sp; /* tokens of a microbatch on this device */
  double tpd = l->tp;
  double te = p->act_token_elems, tr = p->act_token_elems_replicated;
  double score = a * tok * s * (p->act_score_elems * e + mk) / tpd;
  /* Megatron's sequence parallelism splits the regions 1d leaves whole along
   * the sequence: everything divides by tp (Korthikanti et al. eq. 4). */
  int seqpar = oned && l->seq_parallel && l->tp > 1;
  double full = oned && !seqpar ? tok * h * ((tr * e + 2.0 * mk) + (te - tr) * e / tpd) + score
                                : tok * h * (te * e + 2.0 * mk) / tpd + score;
  /* With recompute a block keeps only its input; backward rebuilds one
   * block's activations at a time. */
  /* (DeepSpeed's partitioned checkpoints split that input over tp too) */
  int whole_input = oned && !seqpar && !l->partition_activations;
  double kept = m->recompute ? tok * h * e / (whole_input ? 1.0 : tpd) : full;
  double inflight;
  if (l->pp == 1) inflight = 1.0;
  else if (l->schedule == PAR_SCHED_GPIPE) inflight = microbatches;
  else {
    /* 1F1B: the first stage holds p microbatches (fewer if m < p); the
     * interleaved schedule (1 + (p-1)/(p v)) times that (arXiv 2205.05198 sec. 4.2.3). */
    double pp = l->pp;
    inflight = fmin(pp, microbatches);
    if (l->schedule == PAR_SCHED_INTERLEAVED) inflight *= 1.0 + (pp - 1) / (pp * l->interleave);
    if (!first) inflight = fmax(1.0, inflight - (pp - 1)); /* last stage: one at a time */
  }
  double act = inflight * ls * kept + (m->recompute ? full : 0.0);
  if (m->recompute && l->checkpoint_cpu) { /* the kept inputs wait in host memory */
    act -= inflight * ls * kept;
    out->host += inflight * ls * kept;
  }
  /* Gradients of one block's activations while it runs backward. */
  /* (Megatron's 1d keeps the residual and layernorm gradients whole.) */
  double sr = oned ? fmin(p->bwd_scratch_token_elems_replicated, p->bwd_scratch_token_elems) : 0.0;
  act += tok * h * e * (sr + (p->bwd_scratch_token_elems - sr) / tpd);
  /* The embedding's dropout mask; its output is the first block's input,
   * among that block's kept values (Korthikanti et al. count a block's input
   * as its first layernorm's), unless the implementation keeps it apart
   * (embed_output_kept: strata's engine counts each block's output instead). */
  if (first) act += inflight * tok * h * (p->embed_output_kept * e + mk);
  /* Logits in compute precision for each microbatch in flight on the last
   * stage (they wait for its backward: one under 1F1B, all m under GPipe),
   * plus the fp32 working copy of the vocab-parallel cross-entropy (its
   * gradient), one at a time. */
  if (last && p->head_chunk_bytes > 0) {
    /* A fused head (tensor_classifier_xent): one chunk of rows of f32
     * logits, its 16-bit gradient and the weight rounded once when the
     * activations are 16-bit; nothing waits for backward. */
    double rows = fmax(1.0, floor(p->head_chunk_bytes / (4.0 * v)));
    rows = fmin(rows, tok);
    act += rows * v * 4.0 + (e < 4.0 ? rows * v * e + v * h * e : 0.0);
  } else if (last) {
    act += tok * v / (oned ? tpd : pdiv) * (inflight * e + 4.0);
  }
  /* (and each one's final layernorm input and output, which its backward
   * and the head's weight gradient read; one of each is in the terms above) */
  if (last && l->pp > 1) act += 2.0 * (inflight - 1.0) * tok * h * e;
  /* A stage's output, sent to the next, for each microbatch in flight, when
   * kept until the microbatch's backward (params.keep_stage_outputs). */
  if (!last) act += p->keep_stage_outputs * inflight * tok * h * e / (seqpar ? tpd : 1.0);
  if (!oned && l->tp > 1) act = plan_md_activations(m, l); /* strata's 2D, 2.5D, 3D (one stage) */
  out->mem[PAR_MEM_ACTIV] = act;

  /* Communication buffers: gradient buckets when gradients are reduced or
   * copied off the device; ZeRO-3's gathered parameters, as the
   * implementation holds them (docs/planner.md, Buffers). */
  double buf = 0.0;
  if (nd > 1 || l->offload_optimizer != PAR_TIER_DEVICE) buf += p->dp_bucket_bytes;
  if (l->zero_stage >= 3 && p->zero3_prefetch_layers > 0) {
    /* strata's engine (libparallel/src/dist/state.c): at a region's NEED the
     * region and the next one are gathered whole (padded to the dp shards);
     * the tied embedding stays gathered through each pass. */
    double r0 = v * h / pdiv + s * h, rb = block;
    if (l->tp == 1 || oned) {
      r0 = plan_sharded(v * h / l->tp + s * h, nd, p->shard_align);
      rb = plan_sharded((12.0 * h * h + 7.0 * h) / l->tp + 6.0 * h, nd, p->shard_align);
    }
    buf += ((first || last ? r0 : 0.0) + fmin(p->zero3_prefetch_layers, ls) * rb) * wb;
  } else if (l->zero_stage >= 3) {
    double persist = 0.0;
    double live = deepspeed_gathered(m, l, p, first, last, ls, pdiv, params, &persist);
    buf += (live + persist) * wb;
  }
  /* Ring self-attention's backward: its queries and their gradient, two
   * blocks of k, v, dk and dv in flight, a row sum per query and head. */
  if (l->sp > 1) buf += 10.0 * tok * h * e / l->tp + tok * m->heads * e / l->tp;
  out->mem[PAR_MEM_BUFFERS] = buf;
  out->mem[PAR_MEM_RESERVED] = p->device_reserved_bytes;
  for (int i = 0; i < PAR_MEM_COUNT; i++) out->total += out->mem[i];
}

/* ---------------------------------------------------------------- estimate */

static double gb(double b) { return b / 1e9; }

int par_plan_estimate(const par_gpt_config_t *m, const par_layout_t *l, const par_cluster_t *c,
                      const par_plan_params_t *pp_, par_plan_t *out) {
  if (!out) return STRATA_EINVAL;
  memset(out, 0, sizeof *out);
  if (!m || !l || !c) {
    snprintf(out->why, sizeof out->why, "model, layout or cluster is NULL");
    return STRATA_EINVAL;
  }
  const par_plan_params_t *p = plan_params_or_default(pp_);
  int rc = par_cluster_validate(c, out->why, sizeof out->why);
  if (rc) return rc;
  int world = c->nodes * c->gpus_per_node;
  rc = par_layout_validate(m, l, world, out->why, sizeof out->why);
  if (rc) return rc;
  double peak = c->peak_flops[l->precision];
  if (peak <= 0) {
    static const char *pn[] = {"fp32", "bf16", "fp16"};
    snprintf(out->why, sizeof out->why, "cluster '%s' has no %s peak (the GPU lacks it)", c->name,
             pn[l->precision]);
    return STRATA_EINVAL;
  }
  /* The matmul rate of a training step: the device's sustained GEMM rate
   * (the cluster's gemm_efficiency of its peak, a property of the device)
   * times the share of it a step's matmuls reach (params.gemm_efficiency). */
  double gemm_rate = p->gemm_efficiency * c->gemm_efficiency[l->precision] * peak;
  out->valid = 1;
  out->params = par_plan_param_count(m);

  double h = m->hidden, s = m->seq, v = m->vocab, a = m->heads, b = l->microbatch;
  int mb = l->global_batch / (l->dp * l->microbatch);
  out->microbatches = mb;

  /* Memory: the first and the last pipeline stage differ (embeddings and
   * in-flight activations vs logits); the larger decides. */
  stage_mem_t first, last;
  stage_memory(m, l, p, 1, l->pp == 1, mb, &first);
  if (l->pp > 1) stage_memory(m, l, p, 0, 1, mb, &last);
  else last = first;
  const stage_mem_t *worst = first.total >= last.total ? &first : &last;
  memcpy(out->mem, worst->mem, sizeof out->mem);
  out->mem_total = worst->total;
  out->params_device = fmax(first.params, last.params);
  double per_gpu_host = fmax(first.host, last.host), per_gpu_nvme = fmax(first.nvme, last.nvme);
  out->cpu_bytes_node = per_gpu_host * c->gpus_per_node;
  out->nvme_bytes_node = per_gpu_nvme * c->gpus_per_node;

  /* Time of one microbatch on the last stage (it has the logit layer): GEMMs
   * at gemm_efficiency of peak (arXiv 2104.04473 eq. 3 per device), and the
   * memory-bound kernels at hbm_efficiency of HBM bandwidth. */
  int mixed = l->precision != PAR_PREC_FP32;
  double wb = mixed ? 2.0 : 4.0, e = p->act_elem_bytes > 0 ? p->act_elem_bytes : wb;
  double ls = stage_layers(m, l);
  double split = (double)l->tp * l->sp;
  double fwd = 1.0, bwd = p->bwd_factor, rc_ = m->recompute ? 1.0 : 0.0;
  double passes = fwd + bwd + rc_;
  double block_fwd = 24.0 * b * s * h * h + 4.0 * b * s * s * h;
  double gemm_mb = (passes * ls * block_fwd + (fwd + bwd) * 2.0 * b * s * h * v) / split;
  double t_gemm = gemm_mb / gemm_rate;
  /* Megatron's 1d leaves layernorms and bias+dropout+residual whole on
   * every tensor rank; the other modes split every activation. */
  double rep = l->tp_mode == PAR_TP_1D ? p->ew_passes_token_replicated : 0.0;
  double ew_fwd = (rep * b * s * h + ((p->ew_passes_token - rep) * b * s * h +
                                      p->ew_passes_score * a * b * s * s) / l->tp) * e / l->sp;
  double t_ew = passes * ls * ew_fwd / (p->hbm_efficiency * c->gpu_mem_bw);

  /* Tensor-parallel traffic per microbatch: four linear layers per block
   * (qkv h->3h, proj h->h, fc h->4h, fc-proj 4h->h); recompute repeats the
   * forward third. Groups per axis: 1d one group; 2d rows and columns;
   * 2.5d the same q x q planes; 3d three axes. */
  plan_link_t lk;
  double t_tp = 0.0, tp_bytes = 0.0;
  if (l->tp > 1) {
    double rows = b * s / l->sp;
    double lin[4][2] = {{h, 3 * h}, {h, h}, {h, 4 * h}, {4 * h, h}};
    double bytes = 0.0;
    for (int i = 0; i < 4; i++)
      bytes += plan_tp_linear_bytes(l->tp_mode, l->tp, l->tp_depth, rows, lin[i][0], lin[i][1], e);
    /* Recompute repeats the forward's share of the traffic: Megatron 1D one
     * allreduce of its two per linear pair (+50%), 2D and 2.5D one of SUMMA's
     * three collectives, 3D half of it. */
    double fwd_share = l->tp_mode == PAR_TP_2D || l->tp_mode == PAR_TP_2P5D ? 1.0 / 3.0 : 0.5;
    bytes *= ls * (1.0 + rc_ * fwd_share);
    double msgs = 4.0 * ls * tp_linear_msgs(l->tp_mode, l->tp, l->tp_depth) * (1.0 + rc_ * fwd_share);
    int q = plan_tp_q(l);
    int axes = l->tp_mode == PAR_TP_1D ? 1 : l->tp_mode == PAR_TP_3D ? 3 : 2;
    /* Bytes split evenly over the axes; axis i spans q ranks q^i apart
     * (1d: the whole tp group, innermost). */
    double stride = 1.0;
    for (int ax = 0; ax < axes; ax++) {
      int size = axes == 1 ? l->tp : q;
      plan_group_link(c, p, (int)stride, size, &lk);
      t_tp += (bytes / axes) / lk.bw + (msgs / axes) * lk.lat;
      stride *= size;
    }
    tp_bytes = bytes;
    /* DeepSpeed's partitioned checkpoints (1d, recompute, no sequence
     * parallelism): before each block's recomputation its input is
     * all-gathered over the tensor group, (t-1)/t of tok h e per rank
     * (strata's engine likewise: tests/train/pp_engine.c counts them). */
    if (l->tp_mode == PAR_TP_1D && m->recompute && l->partition_activations && !l->seq_parallel) {
      double full = b * s / l->sp * h * e, t = l->tp;
      plan_group_link(c, p, 1, l->tp, &lk);
      t_tp += ls * plan_gather_time(&lk, full);
      tp_bytes += ls * (t - 1) / t * full;
    }
  }

  /* Sequence parallelism (ring self-attention, arXiv 2105.13120), per block
   * and microbatch as strata's ring moves them (strata/par_ring.h): the
   * forward passes k and v (2 chunks) sp-1 hops (again when the block is
   * recomputed); the backward passes k and v sp-1 hops and each block's
   * running dk and dv sp hops, the last one bringing them home. */
  double t_sp = 0.0, sp_bytes = 0.0;
  if (l->sp > 1) {
    double sp = l->sp;
    double chunk = b * (s / sp) * h * e / l->tp;
    sp_bytes = ls * ((fwd + rc_) * 2.0 * (sp - 1) + (4.0 * sp - 2.0)) * chunk;
    plan_group_link(c, p, l->tp, l->sp, &lk);
    t_sp = sp_bytes / lk.bw + ls * ((fwd + rc_) * (sp - 1) + 2.0 * sp - 1.0) * lk.lat;
  }

  /* CPU-offloaded activation checkpoints (DeepSpeed's cpu_checkpointing,
   * layout.checkpoint_cpu, with recompute): each block's kept input goes to
   * host memory in forward and comes back before the block's recomputation
   * in backward, 2 x its bytes over PCIe per block and microbatch. DeepSpeed
   * copies them on the compute stream (.cpu() and .to(device) in
   * runtime/activation_checkpointing/checkpointing.py; its transport stream
   * is commented out), so nothing hides them: ckpt_cpu_overlap 0. */
  double t_ckpt = 0.0, ckpt_bytes = 0.0;
  if (m->recompute && l->checkpoint_cpu) {
    ckpt_bytes = 2.0 * ls * checkpoint_bytes(m, l, p);
    t_ckpt = (1.0 - p->ckpt_cpu_overlap) * ckpt_bytes / (c->host_bw * p->host_efficiency);
  }

  double t_mb = t_gemm + t_ew + t_tp + t_sp + t_ckpt;
  double vchunks = l->schedule == PAR_SCHED_INTERLEAVED ? l->interleave : 1;
  /* Pipeline bubble (p-1)/m of the ideal time, (p-1)/(v m) interleaved
   * (arXiv 2104.04473 sec. 2.2), with the stages' imbalance: the last stage
   * (head and loss) is the slowest, so the steady state runs at its pace,
   * m t_last, while filling and draining the pipeline passes through the
   * other p - 1 stages at theirs, t_mid (the blocks alone; the first
   * stage's embedding lookup is memory-bound and negligible):
   * step = m t_last + (p - 1) t_mid / v. */
  double head_gemm = (fwd + bwd) * 2.0 * b * s * h * v / split / gemm_rate;
  /* With an uneven split the other stages hold the l - ceil(l/p) blocks the
   * last does not: the fill and drain pass through them, (l - ls) blocks at
   * the per-block time ((p - 1) ls blocks when even). */
  double t_block = (t_mb - head_gemm) / ls;
  double t_bubble = l->pp > 1 ? ((double)m->layers - ls) / vchunks * t_block : 0.0;
  /* Pipeline sends: b s h bytes per microbatch per boundary each way (b s h
   * / t with Megatron's scatter-gather over the tensor group), on the
   * critical path. */
  double t_pp = 0.0, pp_bytes = 0.0;
  if (l->pp > 1) {
    double msg = b * (s / l->sp) * h * e / (p->pp_scatter_gather > 0 || l->seq_parallel ? l->tp : 1);
    plan_group_link(c, p, l->tp * l->sp * l->dp, l->pp, &lk);
    double sends = 2.0 * vchunks * (mb + l->pp - 1);
    pp_bytes = 2.0 * vchunks * mb * msg;
    t_pp = sends * p2p_time(&lk, msg);
  }

  /* Data parallel reduction over dp x sp replicas (ZeRO sec. 7): plain and
   * stage 1: allreduce (reduce-scatter + allgather) once per step, hidden
   * behind the last microbatch's backward; stage 2: a reduce-scatter after
   * every microbatch's backward + an allgather of the updated parameters;
   * stage 3: per microbatch an allgather of the parameters before forward,
   * another before backward (recomputation runs inside a block's backward
   * on the same gathered parameters) and the reduce-scatter: 3 Psi.
   * Stages 2 and 3 issue one collective per region (the embeddings, each
   * block, the final layernorm), as strata's engine and FSDP do, and each
   * pays the ring's latency (N-1) alpha: at thousands of ranks, 10 us a hop
   * costs tens of ms per block. The data-parallel group (ranks tp apart)
   * runs on the links it crosses (plan_group_link: NVLink inside a node,
   * its share of the node's NICs across nodes). ZeRO-2 hides a pass behind
   * its backward as far as that lasts; ZeRO-3 layer by layer (below). */
  double nd = (double)l->dp * l->sp;
  double grads = out->params_device * wb;
  double t_dp = 0.0, dp_bytes = 0.0, t_z3 = 0.0, z3_bytes = 0.0;
  double t_bwd_mb = t_mb * bwd / passes;
  if (nd > 1) {
    plan_group_link(c, p, l->tp, (int)nd, &lk);
    double frac = (nd - 1) / nd;
    double regions = ls + 2.0;                                 /* blocks, embeddings, final LN */
    double pass = plan_gather_time(&lk, grads) + (regions - 1.0) * (nd - 1.0) * lk.lat;
    /* with pipeline stages the reduction follows the flush unless posted
     * during the last microbatch (pp_dp_overlap) */
    double overlap = p->dp_overlap * (l->pp > 1 ? p->pp_dp_overlap : 1.0);
    if (l->zero_stage <= 1) {
      dp_bytes = 2.0 * frac * grads;
      t_dp = fmax(0.0, plan_allreduce_time(&lk, grads) - overlap * t_bwd_mb);
    } else if (l->zero_stage == 2) {
      /* a reduce-scatter pass behind every microbatch's backward */
      dp_bytes = mb * frac * grads + frac * grads;
      double hide = overlap * t_bwd_mb;
      t_dp = mb * fmax(0.0, pass - hide) + plan_gather_time(&lk, grads);
    } else {
      /* ZeRO-3 layer by layer, as the prefetching schedules run it (strata's
       * engine and DeepSpeed alike): while one region computes, the next
       * one's all-gather runs on the data-parallel group's link; a region
       * waits for the part of its gather its predecessor's compute did not
       * cover, max(0, comm - compute). Forward: the embeddings' gather and
       * the first block's (behind the embedding lookup, which takes no
       * time) are exposed, each further block's hides behind the block
       * before, the final layernorm's behind the last. Backward (the head
       * first, then the blocks in reverse): the final layernorm's and the
       * tied embedding's gathers are exposed, the last block's hides behind
       * the head's backward, and behind each block's backward (recompute
       * included, on the same gathered parameters) run the next block's
       * gather and the previous one's reduce-scatter, one after the other on
       * the same link; the first block's and the embeddings' reduce-scatters
       * follow the last compute and are exposed. */
      dp_bytes = mb * frac * grads;
      z3_bytes = mb * 2.0 * frac * grads;
      int oned = l->tp_mode == PAR_TP_1D;
      double pdiv = l->tp_mode == PAR_TP_2P5D ? (double)l->tp / l->tp_depth : (double)l->tp;
      double blk = ((12.0 * h * h + 7.0 * h) / pdiv + 6.0 * h / (oned ? 1.0 : pdiv)) * wb;
      double emb = (v * h / pdiv + s * h) * wb, fin = 2.0 * h * wb;
      double gB = plan_gather_time(&lk, blk), gE = plan_gather_time(&lk, emb), gF = plan_gather_time(&lk, fin);
      double rsB = gB, o = p->zero3_overlap;
      if (p->zero3_prefetch_layers <= 0) {
        /* DeepSpeed gathers module by module: one coalesced all-gather per
         * prefetch batch of about zero3_prefetch_elems elements, at least one
         * module (qkv, proj, fc, fc-proj) each; each call pays the ring's
         * latency. Without a prefetch bucket it gathers each module when
         * needed: nothing overlaps. */
        double elems = blk / wb, calls = p->zero3_prefetch_elems > 0 ? fmin(4.0, elems / p->zero3_prefetch_elems) : 4.0;
        gB += (calls - 1.0) * (nd - 1.0) * lk.lat;
        if (p->zero3_prefetch_elems <= 0) o = 0.0;
      }
      double cf = o * t_block * fwd / passes, cb = o * t_block * (bwd + rc_) / passes;
      double chb = o * head_gemm * bwd / (fwd + bwd);
      int L = (int)ls;
      /* forward: gathers only */
      double ef = gE + gB + (L - 1) * fmax(0.0, gB - cf) + fmax(0.0, gF - cf);
      /* backward, with (rs = 1) and without (rs = 0) the reduce-scatters */
      double eb[2];
      for (int rs = 0; rs <= 1; rs++) {
        double x = gF + gE + fmax(0.0, gB - chb);
        for (int j = L; j >= 1; j--) /* during block j's backward: block j-1's gather, the
                                        reduce-scatter of the region finished before */
          x += fmax(0.0, (j >= 2 ? gB : 0.0) + (rs ? (j == L ? gF : rsB) : 0.0) - cb);
        if (rs) x += rsB + gE; /* the first block's and the embeddings' reduce-scatters */
        eb[rs] = x;
      }
      t_z3 = mb * (ef + eb[0]);   /* the gathers' exposure */
      t_dp = mb * (eb[1] - eb[0]); /* what the reduce-scatters add */
    }
  }

  /* The tied embedding: with pipeline stages the first and the last sum
   * its gradient (V h / t elements, Megatron's embedding group) after the
   * flush, one allreduce of two ranks p - 1 stages apart. */
  if (l->pp > 1) {
    plan_group_link(c, p, l->tp * l->sp * l->dp * (l->pp - 1), 2, &lk);
    double wte = v * h / (l->tp_mode == PAR_TP_1D ? l->tp : 1) * wb;
    t_dp += plan_allreduce_time(&lk, wte);
    dp_bytes += wte;
  }

  /* Offload traffic over PCIe (host_bw per GPU) and NVMe (per node). */
  double t_off = 0.0, off_bytes = 0.0, t_opt = 0.0;
  double oshard = l->zero_stage >= 1 ? nd : 1.0;
  double opt_params = out->params_device / oshard; /* parameters this device updates */
  double host_bw = c->host_bw * p->host_efficiency;
  double nvme_bw = c->nvme_bw * p->host_efficiency / c->gpus_per_node; /* per GPU share */
  if (l->offload_optimizer != PAR_TIER_DEVICE) {
    /* ZeRO-Offload (arXiv 2101.06840 sec. 4): gradients down, updated
     * parameters up, 4P bytes per step in fp16. */
    off_bytes += opt_params * 2.0 * wb;
    double t = opt_params * 2.0 * wb / host_bw;
    if (l->offload_optimizer == PAR_TIER_NVME && c->nvme_bw > 0) {
      double k = mixed ? 12.0 : 8.0; /* states read and written back */
      t += 2.0 * opt_params * k / nvme_bw;
    }
    t_off += fmax(t * (1.0 - p->offload_overlap), t - mb * t_bwd_mb);
    /* CPU Adam: bandwidth- or FLOP-bound over the node's CPUs, which serve
     * all its GPUs at once. */
    double node_params = opt_params * c->gpus_per_node;
    t_opt = fmax(node_params * p->cpu_adam_bytes / (c->cpu_mem_bw * p->host_efficiency),
                 node_params * p->cpu_adam_flops / c->cpu_flops);
  } else {
    t_opt = opt_params * p->gpu_optim_bytes / (c->gpu_mem_bw * p->hbm_efficiency);
  }
  if (l->offload_params != PAR_TIER_DEVICE) {
    /* ZeRO-Infinity: every microbatch fetches this device's parameter
     * shard forward and backward (and again to recompute). */
    double shard = out->params_device * wb / nd;
    double fetches = mb * (2.0 + rc_);
    double bw = l->offload_params == PAR_TIER_NVME && c->nvme_bw > 0 ? fmin(host_bw, nvme_bw)
                                                                      : host_bw;
    off_bytes += fetches * shard;
    double t = fetches * shard / bw;
    t_off += fmax(t * (1.0 - p->offload_overlap), t - mb * t_mb);
  }

  out->time[PAR_T_COMPUTE] = mb * t_gemm;
  out->time[PAR_T_MEMBOUND] = mb * t_ew;
  out->time[PAR_T_TP] = mb * t_tp;
  out->time[PAR_T_SP] = mb * t_sp;
  out->time[PAR_T_BUBBLE] = t_bubble;
  out->time[PAR_T_PP] = t_pp;
  out->time[PAR_T_DP] = t_dp;
  out->time[PAR_T_ZERO3] = t_z3;
  out->time[PAR_T_OFFLOAD] = t_off + mb * t_ckpt;
  out->time[PAR_T_OPTIM] = t_opt;
  out->comm_bytes[PAR_T_TP] = mb * tp_bytes;
  out->comm_bytes[PAR_T_SP] = mb * sp_bytes;
  out->comm_bytes[PAR_T_PP] = pp_bytes;
  out->comm_bytes[PAR_T_DP] = dp_bytes;
  out->comm_bytes[PAR_T_ZERO3] = z3_bytes;
  out->comm_bytes[PAR_T_OFFLOAD] = off_bytes + mb * ckpt_bytes;
  for (int i = 0; i < PAR_T_COUNT; i++) out->step_time += out->time[i];
  /* the schedule's own: (p - 1) / (v m) of the ideal time on balanced stages */
  out->bubble_fraction = mb > 0 ? (l->pp - 1) / (vchunks * mb) : 0.0;

  out->flops_step = par_megatron_flops(m, l->global_batch, m->recompute);
  out->model_flops_step = par_megatron_flops(m, l->global_batch, 0);
  out->tflops_per_gpu = out->flops_step / out->step_time / world / 1e12;
  out->mfu = out->model_flops_step / out->step_time / world / peak;
  out->tokens_per_s = (double)l->global_batch * s / out->step_time;
  out->days = p->token_budget / out->tokens_per_s / 86400.0;

  /* Fit: device memory of the worst stage, host and NVMe per node. */
  out->fits = 1;
  if (out->mem_total > c->gpu_mem_bytes) {
    int big = 0;
    for (int i = 1; i < PAR_MEM_COUNT; i++)
      if (worst->mem[i] > worst->mem[big]) big = i;
    static const char *names[] = {"parameters", "gradients", "optimizer states", "activations",
                                  "buffers", "reserved"};
    snprintf(out->why, sizeof out->why,
             "needs %.2f GB per device of %.2f GB (largest: %s %.2f GB)", gb(out->mem_total),
             gb(c->gpu_mem_bytes), names[big], gb(worst->mem[big]));
    out->fits = 0;
  } else if (out->cpu_bytes_node > 0 &&
             out->cpu_bytes_node + p->cpu_reserved_bytes > c->cpu_mem_bytes) {
    snprintf(out->why, sizeof out->why,
             "needs %.1f GB of host memory per node (+%.1f GB reserved) of %.1f GB",
             gb(out->cpu_bytes_node), gb(p->cpu_reserved_bytes), gb(c->cpu_mem_bytes));
    out->fits = 0;
  } else if (out->nvme_bytes_node > c->nvme_bytes) {
    snprintf(out->why, sizeof out->why, "needs %.1f GB of NVMe per node of %.1f GB",
             gb(out->nvme_bytes_node), gb(c->nvme_bytes));
    out->fits = 0;
  }
  return STRATA_OK;
}

int par_plan_calibrate(const par_gpt_config_t *m, const par_layout_t *l, const par_cluster_t *c,
                       const par_plan_params_t *p, double target_tflops, double *eff) {
  if (!eff || !(target_tflops > 0)) return STRATA_EINVAL;
  par_plan_params_t q = *plan_params_or_default(p);
  par_plan_t r;
  double lo = 0.01, hi = 1.0;
  /* Predicted TFLOP/s rises monotonically with gemm_efficiency. */
  q.gemm_efficiency = hi;
  int rc = par_plan_estimate(m, l, c, &q, &r);
  if (rc) return rc;
  if (r.tflops_per_gpu < target_tflops) return STRATA_EINVAL;
  q.gemm_efficiency = lo;
  rc = par_plan_estimate(m, l, c, &q, &r);
  if (rc) return rc;
  if (r.tflops_per_gpu > target_tflops) return STRATA_EINVAL;
  for (int it = 0; it < 60; it++) {
    q.gemm_efficiency = 0.5 * (lo + hi);
    par_plan_estimate(m, l, c, &q, &r);
    if (r.tflops_per_gpu < target_tflops) lo = q.gemm_efficiency;
    else hi = q.gemm_efficiency;
  }
  *eff = 0.5 * (lo + hi);
  return STRATA_OK;
}

/* ------------------------------------------------------------------ largest */

static long lcm_l(long a, long b) {
  long x = a, y = b;
  while (y) {
    long t = x % y;
    x = y, y = t;
  }
  return a / x * b;
}

/* The model of the family at size k x step; 1 when it fits, 0 when not, -1 invalid. */
static int largest_try(const par_gpt_config_t *m, const par_layout_t *l, const par_cluster_t *c,
                       const par_plan_params_t *p, par_grow_t grow, long size, par_gpt_config_t *mk, par_plan_t *r) {
  *mk = *m;
  if (grow == PAR_GROW_LAYERS) mk->layers = (int)size;
  else mk->hidden = (int)size;
  return par_plan_estimate(mk, l, c, p, r) ? -1 : r->fits;
}

int par_plan_largest(const par_gpt_config_t *m, const par_layout_t *l, const par_cluster_t *c,
                     const par_plan_params_t *p, par_grow_t grow, int step, int max, par_gpt_config_t *best,
                     par_plan_t *plan) {
  par_plan_t r, keep;
  par_gpt_config_t mk, mbest;
  memset(&keep, 0, sizeof keep);
  if (plan) memset(plan, 0, sizeof *plan);
  if (!m || !l || !c || (grow != PAR_GROW_LAYERS && grow != PAR_GROW_HIDDEN) || step < 0 || max < 0) {
    if (plan) snprintf(plan->why, sizeof plan->why, "largest: a NULL input, an unknown size to grow or a negative step");
    return STRATA_EINVAL;
  }
  long st = step;
  if (!st)
    st = grow == PAR_GROW_LAYERS ? (l->schedule == PAR_SCHED_INTERLEAVED ? (long)l->pp * l->interleave : 1)
                                 : lcm_l(m->heads > 0 ? m->heads : 1, 128);
  long hi_max = max ? max : grow == PAR_GROW_LAYERS ? 100000 : 1048576;
  long kmax = hi_max / st;
  /* With layers growing, fewer than pp would be invalid: start at the
   * least multiple of the step that gives every stage a block. */
  long k0 = 1;
  if (grow == PAR_GROW_LAYERS)
    while (k0 * st < l->pp) k0++;
  if (kmax < k0) {
    if (plan) snprintf(plan->why, sizeof plan->why, "largest: max %ld is below the first size %ld", hi_max, k0 * st);
    return STRATA_EINVAL;
  }
  int f = largest_try(m, l, c, p, grow, k0 * st, &mk, &r);
  if (f < 0) {
    if (plan) *plan = r;
    return STRATA_EINVAL;
  }
  if (!f) {
    if (plan) *plan = r;
    return STRATA_ENOTFOUND;
  }
  mbest = mk, keep = r;
  /* Doubling, then bisection: memory grows with either size. A size the
   * layout cannot take (an invalid one) counts as not fitting. */
  long lo = k0, hi = 0;
  for (long k = 2 * k0; !hi; k *= 2) {
    if (k > kmax) k = kmax;
    f = largest_try(m, l, c, p, grow, k * st, &mk, &r);
    if (f > 0) {
      lo = k, mbest = mk, keep = r;
      if (k == kmax) break;
    } else {
      hi = k;
    }
  }
  while (hi && hi - lo > 1) {
    long mid = lo + (hi - lo) / 2;
    f = largest_try(m, l, c, p, grow, mid * st, &mk, &r);
    if (f > 0) lo = mid, mbest = mk, keep = r;
    else hi = mid;
  }
  if (best) *best = mbest;
  if (plan) *plan = keep;
  return STRATA_OK;
}
