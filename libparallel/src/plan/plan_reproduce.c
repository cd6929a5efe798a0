/* Reproductions of published results (shared/PUBLISHED.md). Each builds the
 * paper's model, layout and machine, asks the planner, and sets the paper's
 * figure beside the prediction. The published figures below are the
 * "published" column only: every "predicted" figure is computed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

typedef struct {
  par_repro_row_t *rows;
  size_t cap, n;
} sink_t;

static void put(sink_t *s, const char *unit, double published, double predicted, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));
#include <stdarg.h>
static void put(sink_t *s, const char *unit, double published, double predicted, const char *fmt,
                ...) {
  if (s->n < s->cap) {
    par_repro_row_t *r = &s->rows[s->n];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->label, sizeof r->label, fmt, ap);
    va_end(ap);
    snprintf(r->unit, sizeof r->unit, "%s", unit);
    r->published = published;
    r->predicted = predicted;
    r->rel_err = published != 0 ? (predicted - published) / published
                                : (predicted == 0 ? 0.0 : INFINITY);
  }
  s->n++;
}

static par_layout_t mk_layout(int dp, int tp, int pp, int mb, int B, par_precision_t prec) {
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.dp = dp;
  l.tp = tp;
  l.pp = pp;
  l.microbatch = mb;
  l.global_batch = B;
  l.precision = prec;
  return l;
}

static int cluster(const char *name, int nodes, par_cluster_t *c) {
  int rc = par_cluster_preset(name, c, NULL, 0);
  c->nodes = nodes;
  return rc;
}

/* ------------------------------------------------------------------ ZeRO */

static int zero_table1(const par_plan_params_t *p, sink_t *s) {
  /* arXiv 1910.02054 Table 1: model states per device, GB, printed as the
   * paper prints them (par_zero_format_gb). */
  static const double nd[6] = {1, 4, 16, 64, 256, 1024};
  static const double psz[3] = {7.5e9, 128e9, 1e12};
  static const char *pname[3] = {"7.5B", "128B", "1T"};
  static const double pub[6][3][3] = {
      {{120, 120, 120}, {2048, 2048, 2048}, {16000, 16000, 16000}},
      {{52.5, 41.3, 30}, {896, 704, 512}, {7000, 5500, 4000}},
      {{35.6, 21.6, 7.5}, {608, 368, 128}, {4750, 2875, 1000}},
      {{31.4, 16.6, 1.88}, {536, 284, 32}, {4187, 2218, 250}},
      {{30.4, 15.4, 0.47}, {518, 263, 8}, {4046, 2054, 62.5}},
      {{30.1, 15.1, 0.12}, {513, 257, 2}, {4011, 2013, 15.6}},
  };
  for (int m = 0; m < 3; m++)
    for (int r = 0; r < 6; r++)
      for (int st = 1; st <= 3; st++) {
        double o[3];
        par_zero_model_states(psz[m], (int)nd[r], st, 12.0, o);
        char buf[32];
        par_zero_format_gb((o[0] + o[1] + o[2]) / 1e9, buf, sizeof buf);
        put(s, "GB", pub[r][m][st - 1], strtod(buf, NULL), "%s Nd=%g stage %d", pname[m], nd[r], st);
      }
  return STRATA_OK;
}

static int zero_comm(const par_plan_params_t *p, sink_t *s) {
  /* arXiv 1910.02054 sec. 7: elements sent per device per step, in units of
   * P, from the planner's traffic for a 7.5B-class GPT over 1024 V100 (one
   * microbatch, so per step = per microbatch as in the paper). */
  par_gpt_config_t m = {.layers = 36, .hidden = 4096, .heads = 32, .seq = 1024, .vocab = 51200};
  par_cluster_t c;
  cluster("dgx2-v100", 64, &c);
  static const double pub[4] = {2, 2, 2, 3};
  for (int st = 0; st <= 3; st++) {
    par_layout_t l = mk_layout(1024, 1, 1, 1, 1024, PAR_PREC_FP16);
    l.zero_stage = st;
    par_plan_t r;
    int rc = par_plan_estimate(&m, &l, &c, p, &r);
    if (rc) return rc;
    double elems = (r.comm_bytes[PAR_T_DP] + r.comm_bytes[PAR_T_ZERO3]) / 2.0;
    put(s, "x P", pub[st], elems / r.params_device, "%s, Nd=1024",
        st ? (st == 1 ? "stage 1" : st == 2 ? "stage 2" : "stage 3") : "data parallel");
  }
  /* Activations "~12 h B s l values" without recompute: the planner's
   * activation bytes of one layer over (e h B s), attention scores
   * included, for the GPT-2 1.5B shape the paper uses (48 x 1600, s 1024). */
  par_gpt_config_t g2 = {.layers = 48, .hidden = 1600, .heads = 25, .seq = 1024, .vocab = 50304};
  par_cluster_t one;
  cluster("dgx2-v100", 1, &one);
  one.gpus_per_node = 1;
  par_layout_t l = mk_layout(1, 1, 1, 32, 32, PAR_PREC_FP16);
  par_plan_t r;
  int rc = par_plan_estimate(&g2, &l, &one, p, &r);
  if (rc) return rc;
  double logits = 32.0 * g2.seq * g2.vocab * (2.0 + 4.0), emb = 32.0 * g2.seq * g2.hidden * 1.0; /* its mask */
  double scores = 32.0 * g2.heads * g2.seq * g2.seq * 5.0 * g2.layers;
  double scratch = 32.0 * g2.seq * g2.hidden * 2.0 * p->bwd_scratch_token_elems;
  double per = (r.mem[PAR_MEM_ACTIV] - logits - emb - scores - scratch) /
               (2.0 * g2.hidden * 32.0 * g2.seq * g2.layers);
  put(s, "values", 12, per, "activations per h B s l, scores aside (GPT-2 1.5B)");
  return STRATA_OK;
}

/* ------------------------------------------------------------- DeepSpeed */

static int deepspeed_3d(const par_plan_params_t *p, sink_t *s) {
  /* 32 workers = 4 pipeline x 4 tensor x 2 data on 8 nodes x 4 GPUs. The
   * planner's mesh (tp innermost, then dp, then pp) decides which groups
   * stay inside a node. */
  par_cluster_t c;
  cluster("dgx1-v100-32gb", 8, &c);
  c.gpus_per_node = 4;
  par_plan_params_t q = *plan_params_or_default(p);
  plan_link_t k;
  plan_group_link(&c, &q, 1, 4, &k);
  put(s, "1=yes", 1, k.inter ? 0 : 1, "tensor group (4) inside a node");
  plan_group_link(&c, &q, 4 * 2, 4, &k);
  put(s, "1=yes", 1, k.inter, "pipeline group (4) across nodes");
  /* Pipeline efficiency of 1F1B with gradient accumulation 4x / 8x the
   * stage count: ideal / (ideal + bubble) from the planner's estimate. */
  par_gpt_config_t m = {.layers = 32, .hidden = 2048, .heads = 16, .seq = 1024, .vocab = 51200,
                        .recompute = 1};
  static const double pub[2] = {0.81, 0.90};
  for (int i = 0; i < 2; i++) {
    int acc = i ? 8 : 4;
    par_layout_t l = mk_layout(2, 4, 4, 1, 2 * acc * 4, PAR_PREC_FP16);
    par_plan_t r;
    int rc = par_plan_estimate(&m, &l, &c, p, &r);
    if (rc) return rc;
    put(s, "", pub[i], 1.0 / (1.0 + r.bubble_fraction), "1F1B efficiency, %d microbatches = %dx stages",
        r.microbatches, acc);
  }
  return STRATA_OK;
}

static int deepspeed_1t(const par_plan_params_t *p, sink_t *s) {
  /* A trillion parameters (Megatron's 1T shape, 128 x 25600): model
   * states with mixed-precision Adam, and the A100 40 GB GPUs that hold
   * them fully sharded (ZeRO-3), nothing else counted. */
  par_gpt_config_t m = {.layers = 128, .hidden = 25600, .heads = 160, .seq = 2048, .vocab = 51200};
  double P = par_plan_param_count(&m), o[3];
  par_zero_model_states(P, 1, 0, 12.0, o);
  double states = o[0] + o[1] + o[2];
  put(s, "TB", 16, states / 1e12, "model states of %.3gT parameters", P / 1e12);
  par_cluster_t c;
  cluster("dgx-a100-40gb", 1, &c);
  int n = 1;
  for (;; n++) {
    par_zero_model_states(P, n, 3, 12.0, o);
    if (o[0] + o[1] + o[2] <= c.gpu_mem_bytes) break;
  }
  put(s, "GPUs", 400, n, "A100 40 GB to hold them (ZeRO-3)");
  return STRATA_OK;
}

/* ---------------------------------------------------------- ZeRO-Offload */

/* The largest model of a family (hidden sizes x depths) that fits: the
 * planner's own verdict (par_plan_largest, depth in steps of the stages). */
static double largest_fitting(const par_cluster_t *c, const par_layout_t *tmpl,
                              const par_plan_params_t *p, const int *hidden, int nh, int heads,
                              int seq, int recompute, par_gpt_config_t *best) {
  double bestp = 0;
  for (int i = 0; i < nh; i++) {
    par_gpt_config_t m = {.layers = tmpl->pp, .hidden = hidden[i], .heads = heads, .seq = seq,
                          .vocab = 50304, .recompute = recompute}, big;
    par_plan_t r;
    if (par_plan_largest(&m, tmpl, c, p, PAR_GROW_LAYERS, tmpl->pp, 400, &big, &r)) continue;
    if (r.params > bestp) {
      bestp = r.params;
      if (best) *best = big;
    }
  }
  return bestp;
}

static const int family[] = {1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 8192};
#define NFAM ((int)(sizeof family / sizeof family[0]))

static int zero_offload(const par_plan_params_t *p, sink_t *s) {
  /* arXiv 2101.06840 fig. 7: one V100 32 GB of a DGX-2 (its 1.5 TB host);
   * GPT family with 16 heads, sequence 1024, microbatch 4, recompute on. */
  par_cluster_t c;
  cluster("dgx2-v100", 1, &c);
  c.gpus_per_node = 1;
  par_layout_t l = mk_layout(1, 1, 1, 4, 4, PAR_PREC_FP16);
  double plain = largest_fitting(&c, &l, p, family, NFAM, 16, 1024, 1, NULL);
  put(s, "B params", 1.4, plain / 1e9, "largest on one V100, data parallel (PyTorch)");
  l.zero_stage = 2;
  l.offload_optimizer = l.offload_gradients = PAR_TIER_CPU;
  double off = largest_fitting(&c, &l, p, family, NFAM, 16, 1024, 1, NULL);
  put(s, "B params", 13, off / 1e9, "largest on one V100, ZeRO-Offload");
  /* Minimum CPU<->GPU traffic per step: 4P bytes (fp16 gradients down,
   * fp16 parameters up). */
  par_gpt_config_t m = {.layers = 40, .hidden = 5120, .heads = 16, .seq = 1024, .vocab = 50304,
                        .recompute = 1};
  par_plan_t r;
  int rc = par_plan_estimate(&m, &l, &c, p, &r);
  if (rc) return rc;
  put(s, "x P bytes", 4, r.comm_bytes[PAR_T_OFFLOAD] / r.params, "host traffic per step");
  return STRATA_OK;
}

/* ------------------------------------------------------------ PatrickStar */

static int patrickstar(const par_plan_params_t *p, sink_t *s) {
  /* arXiv 2108.05818: 8 V100 32 GB with 240 GB of host memory. PatrickStar
   * places chunks of model data (fp16 parameters reused as gradients 2P,
   * fp32 parameters, momentum, variance 12P) anywhere in GPU + CPU memory;
   * a model fits when 14P fits in the host plus what the GPUs leave after
   * activations, buffers and the reserve (from the planner's estimate of
   * the same model laid out ZeRO-3 over the 8 GPUs, model states off). */
  par_cluster_t c;
  cluster("dgx1-v100-32gb", 1, &c);
  c.cpu_mem_bytes = 240e9;
  const par_plan_params_t *q = plan_params_or_default(p);
  static const int cfg[][2] = {{2048, 20}, {2048, 40}, {2304, 64}, {3072, 53},
                               {3072, 72}, {4096, 50}, {4096, 60}};
  double ps = 0, ds = 0;
  for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
    par_gpt_config_t m = {.layers = cfg[i][1], .hidden = cfg[i][0], .heads = 16, .seq = 1024,
                          .vocab = 50304, .recompute = 1};
    par_layout_t l = mk_layout(8, 1, 1, 8, 64, PAR_PREC_FP16);
    l.zero_stage = 3;
    par_plan_t r;
    int rc = par_plan_estimate(&m, &l, &c, p, &r);
    if (rc) return rc;
    double gpu_free = c.gpu_mem_bytes - r.mem[PAR_MEM_ACTIV] - r.mem[PAR_MEM_BUFFERS] -
                      r.mem[PAR_MEM_RESERVED];
    double room = c.gpus_per_node * fmax(0.0, gpu_free) + c.cpu_mem_bytes - q->cpu_reserved_bytes;
    if (14.0 * r.params <= room) ps = fmax(ps, r.params);
    /* DeepSpeed on the same node: ZeRO-Offload (stage 2 + CPU Adam). */
    l.zero_stage = 2;
    l.offload_optimizer = l.offload_gradients = PAR_TIER_CPU;
    rc = par_plan_estimate(&m, &l, &c, p, &r);
    if (rc) return rc;
    if (r.fits) ds = fmax(ds, r.params);
  }
  put(s, "B params", 12, ps / 1e9, "PatrickStar largest of its configurations");
  put(s, "B params", 12.0 / 1.5, ds / 1e9, "DeepSpeed (ZeRO-Offload) largest, same node");
  put(s, "x", 1.5, ds > 0 ? ps / ds : 0, "PatrickStar / DeepSpeed");
  return STRATA_OK;
}

/* ---------------------------------------------------------- Colossal-AI */

static int colossal_tp(const par_plan_params_t *p, sink_t *s) {
  /* Per linear layer, forward + backward, bytes per device with activation
   * and weight of one unit each (M = W = 1, e = 1 byte): the planner's
   * accounting. 1d and 3d in units of the whole activation; 2d and 2.5d as
   * Optimus and Tesseract write them, per SUMMA panel (M/q), hence x q. */
  const int P = 64;
  double q2 = 8, q25 = 4, d25 = 4, q3 = 4;
  double t1 = plan_tp_linear_bytes(PAR_TP_1D, P, 1, 1, 1, 1, 1);
  double t2 = plan_tp_linear_bytes(PAR_TP_2D, P, 1, 1, 1, 1, 1) * q2;
  double t25 = plan_tp_linear_bytes(PAR_TP_2P5D, P, (int)d25, 1, 1, 1, 1) * q25;
  double t3 = plan_tp_linear_bytes(PAR_TP_3D, P, 1, 1, 1, 1, 1);
  put(s, "x M", 2.0 * (P - 1) / P, t1, "1d bandwidth term, P = %d", P);
  put(s, "x M/q", 6.0 * (q2 - 1) / q2, t2, "2d bandwidth term, q = %g", q2);
  put(s, "x M/q", 3.0 * (q25 - 1) * (d25 + 1) / (d25 * q25), t25, "2.5d bandwidth term, q = %g, d = %g",
      q25, d25);
  put(s, "x M", 6.0 * (q3 - 1) / (q3 * q3 * q3), t3, "3d bandwidth term, q = %g", q3);
  /* Partners at 1000 processors: the size of the group a device talks to,
   * less itself, from the planner's group layout. */
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.tp = 1000;
  put(s, "ranks", 999, l.tp - 1, "1d partners at 1000 processors");
  l.tp_mode = PAR_TP_3D;
  put(s, "ranks", 9, plan_tp_q(&l) - 1, "3d partners per axis at 1000 processors");
  return STRATA_OK;
}

/* -------------------------------------------------------------- Megatron */

typedef struct {
  double billions, tflops;
  int heads, h, l, t, p, gpus, B;
} mrow_t;
static const mrow_t mrows[] = {{1.7, 137, 24, 2304, 24, 1, 1, 32, 512},
                               {18.4, 135, 48, 6144, 40, 8, 1, 256, 1024},
                               {145.6, 148, 96, 12288, 80, 8, 8, 1536, 2304}};
#define NMROWS ((int)(sizeof mrows / sizeof mrows[0]))

static void mrow_setup(const mrow_t *r, par_gpt_config_t *m, par_layout_t *l, par_cluster_t *c) {
  *m = (par_gpt_config_t){.layers = r->l, .hidden = r->h, .heads = r->heads, .seq = 2048,
                          .vocab = 51200, .recompute = 1};
  *l = mk_layout(r->gpus / (r->t * r->p), r->t, r->p, 1, r->B, PAR_PREC_FP16);
  cluster("dgx-a100-80gb", r->gpus / 8, c);
}

static int megatron_params(const par_plan_params_t *p, sink_t *s) {
  for (int i = 0; i < NMROWS; i++) {
    par_gpt_config_t m;
    par_layout_t l;
    par_cluster_t c;
    mrow_setup(&mrows[i], &m, &l, &c);
    double P = par_megatron_param_count(&m);
    put(s, "B", mrows[i].billions, P / 1e9, "%d x %d, %d heads (printed to 0.1: %.1f)", m.layers,
        m.hidden, m.heads, floor(P / 1e8 + 0.5) / 10);
  }
  return STRATA_OK;
}

int plan_megatron_calibrate(const par_plan_params_t *p, double *eff) {
  par_gpt_config_t m;
  par_layout_t l;
  par_cluster_t c;
  mrow_setup(&mrows[0], &m, &l, &c);
  return par_plan_calibrate(&m, &l, &c, p, mrows[0].tflops, eff);
}

static int megatron_table1(const par_plan_params_t *p, sink_t *s) {
  /* arXiv 2104.04473 Table 1 on Selene (DGX A100 80 GB), microbatch 1,
   * recompute on, fp16; gemm_efficiency calibrated on the 1.7B row only. */
  par_plan_params_t q = *plan_params_or_default(p);
  int rc = plan_megatron_calibrate(&q, &q.gemm_efficiency);
  if (rc) return rc;
  for (int i = 0; i < NMROWS; i++) {
    par_gpt_config_t m;
    par_layout_t l;
    par_cluster_t c;
    mrow_setup(&mrows[i], &m, &l, &c);
    par_plan_t r;
    rc = par_plan_estimate(&m, &l, &c, &q, &r);
    if (rc) return rc;
    char note[64] = "";
    if (!i) snprintf(note, sizeof note, " (calibrates gemm_efficiency = %.4f)", q.gemm_efficiency);
    put(s, "TFLOP/s", mrows[i].tflops, r.tflops_per_gpu, "%.1fB, t %d p %d, %d GPUs%s",
        mrows[i].billions, mrows[i].t, mrows[i].p, mrows[i].gpus, note);
  }
  return STRATA_OK;
}

static int megatron_time(const par_plan_params_t *p, sink_t *s) {
  /* sec. 5.1: 8 T P / (n X) with the paper's T, n and X, P from the shapes. */
  par_gpt_config_t g3 = {.layers = 96, .hidden = 12288, .heads = 96, .seq = 2048, .vocab = 51200};
  par_gpt_config_t t1 = {.layers = 128, .hidden = 25600, .heads = 160, .seq = 2048, .vocab = 51200};
  put(s, "days", 34,
      par_megatron_train_seconds(300e9, par_megatron_param_count(&g3), 1024, 140e12) / 86400,
      "GPT-3 175B, 300B tokens, 1024 GPUs at 140 TFLOP/s");
  put(s, "days", 84,
      par_megatron_train_seconds(450e9, par_megatron_param_count(&t1), 3072, 163e12) / 86400,
      "1T, 450B tokens, 3072 GPUs at 163 TFLOP/s");
  /* Pipeline bubble (p-1)/m and interleaved (1/v)(p-1)/m from estimates. */
  par_cluster_t c;
  cluster("dgx-a100-80gb", 8, &c);
  par_gpt_config_t m = {.layers = 32, .hidden = 4096, .heads = 32, .seq = 2048, .vocab = 51200,
                        .recompute = 1};
  par_layout_t l = mk_layout(1, 8, 8, 1, 32, PAR_PREC_FP16);
  par_plan_t r;
  int rc = par_plan_estimate(&m, &l, &c, p, &r);
  if (rc) return rc;
  put(s, "", 7.0 / 32.0, r.bubble_fraction, "bubble fraction p 8, m 32");
  l.schedule = PAR_SCHED_INTERLEAVED;
  l.interleave = 2;
  rc = par_plan_estimate(&m, &l, &c, p, &r);
  if (rc) return rc;
  put(s, "", 7.0 / 64.0, r.bubble_fraction, "bubble fraction p 8, m 32, interleaved v 2");
  /* Tensor-parallel traffic per layer per microbatch: 8 b s h (t-1)/t
   * elements (forward + backward, no recompute). */
  m.recompute = 0;
  l = mk_layout(8, 8, 1, 1, 8, PAR_PREC_FP16);
  rc = par_plan_estimate(&m, &l, &c, p, &r);
  if (rc) return rc;
  double bsh = 1.0 * m.seq * m.hidden;
  put(s, "x bsh", 8.0 * 7.0 / 8.0, r.comm_bytes[PAR_T_TP] / 2.0 / m.layers / bsh,
      "tensor-parallel elements per layer, t 8");
  return STRATA_OK;
}

/* ---------------------------------------------------------------- MT-NLG */

static int mtnlg(const par_plan_params_t *p, sink_t *s) {
  /* arXiv 2201.11990: 105 x 20480, 128 heads, s 2048, B 1920, bf16; 8-way
   * tensor inside a node x 35-way pipeline across nodes = 280 A100 80 GB
   * per replica, 16 replicas on 560 DGX A100 nodes (ZeRO-1 over them). */
  par_gpt_config_t m = {.layers = 105, .hidden = 20480, .heads = 128, .seq = 2048, .vocab = 51200,
                        .recompute = 1};
  put(s, "B params", 530, par_plan_param_count(&m) / 1e9, "MT-NLG parameters");
  par_cluster_t c;
  cluster("dgx-a100-80gb", 560, &c);
  par_layout_t l = mk_layout(16, 8, 35, 1, 1920, PAR_PREC_BF16);
  l.zero_stage = 1;
  par_plan_t r;
  int rc = par_plan_estimate(&m, &l, &c, p, &r);
  if (rc) return rc;
  put(s, "1=yes", 1, r.fits, "tp 8 x pp 35 (280 GPUs) x dp 16 fits (%.1f of 80 GB)", r.mem_total / 1e9);
  plan_link_t k;
  par_plan_params_t q = *plan_params_or_default(p);
  plan_group_link(&c, &q, 1, 8, &k);
  put(s, "1=yes", 1, !k.inter, "tensor group inside a node");
  plan_group_link(&c, &q, 8 * 16, 35, &k);
  put(s, "1=yes", 1, k.inter, "pipeline stages across nodes");
  return STRATA_OK;
}

/* -------------------------------------------------------------- dispatch */

static const struct {
  const char *name;
  int (*fn)(const par_plan_params_t *, sink_t *);
  const char *title;
} repros[] = {
    {"zero-table1", zero_table1, "ZeRO Table 1: model states per device (GB, as printed)"},
    {"zero-comm", zero_comm, "ZeRO communication volume per device per step"},
    {"deepspeed-3d", deepspeed_3d, "DeepSpeed 3D parallelism on 8 nodes x 4 GPUs"},
    {"deepspeed-1t", deepspeed_1t, "DeepSpeed: a trillion parameters on A100 40 GB"},
    {"zero-offload", zero_offload, "ZeRO-Offload: largest model on one V100 32 GB"},
    {"patrickstar", patrickstar, "PatrickStar on 8 x V100 32 GB with 240 GB host memory"},
    {"colossal-tp", colossal_tp, "Colossal-AI tensor parallelism, per linear layer"},
    {"megatron-params", megatron_params, "Megatron-LM Table 1 model sizes"},
    {"megatron-table1", megatron_table1, "Megatron-LM Table 1 throughput per GPU"},
    {"megatron-time", megatron_time, "Megatron-LM FLOPs, training time, bubble, traffic"},
    {"mtnlg", mtnlg, "MT-NLG 530B layout on A100 80 GB"},
};
#define NREPROS ((int)(sizeof repros / sizeof repros[0]))

const char *par_plan_reproduce_name(int i) { return i >= 0 && i < NREPROS ? repros[i].name : NULL; }

int par_plan_reproduce(const char *which, const par_plan_params_t *p, par_repro_row_t *rows,
                       size_t cap, size_t *count) {
  if (count) *count = 0;
  if (!which || !count || (cap && !rows)) return STRATA_EINVAL;
  for (int i = 0; i < NREPROS; i++)
    if (!strcmp(repros[i].name, which)) {
      sink_t s = {rows, cap, 0};
      int rc = repros[i].fn(plan_params_or_default(p), &s);
      *count = s.n;
      return rc;
    }
  return STRATA_ENOTFOUND;
}

int par_plan_reproduce_print(FILE *f, const char *which, const par_plan_params_t *p) {
  if (!f || !which) return STRATA_EINVAL;
  int idx = -1;
  for (int i = 0; i < NREPROS; i++)
    if (!strcmp(repros[i].name, which)) idx = i;
  if (idx < 0) return STRATA_ENOTFOUND;
  size_t n = 0;
  int rc = par_plan_reproduce(which, p, NULL, 0, &n);
  if (rc) return rc;
  par_repro_row_t *rows = calloc(n ? n : 1, sizeof *rows);
  if (!rows) return STRATA_ENOMEM;
  rc = par_plan_reproduce(which, p, rows, n, &n);
  if (rc) goto done;
  fprintf(f, "%s\n", repros[idx].title);
  fprintf(f, "  %-62s %12s %12s %9s  %s\n", "", "published", "predicted", "rel.err", "unit");
  for (size_t i = 0; i < n; i++)
    fprintf(f, "  %-62s %12.4g %12.4g %+8.1f%%  %s\n", rows[i].label, rows[i].published,
            rows[i].predicted, 100 * rows[i].rel_err, rows[i].unit);
done:
  free(rows);
  return rc;
}
