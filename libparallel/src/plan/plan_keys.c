/* Fields of par_cluster_t and par_plan_params_t by name, so that Lua
 * tables (recipes/clusters/NAME.lua, a recipe's planner overrides) map onto the
 * C structs through one table of names kept next to the structs' meaning. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <math.h>

#include <strata/parallel.h>
#include <strata/tensor.h>

#include "num.h"

typedef struct {
  const char *key;
  size_t off;
  int is_int;
} field_t;

#define CF(f) {#f, offsetof(par_cluster_t, f), 0}
static const field_t cluster_fields[] = {
    {"nodes", offsetof(par_cluster_t, nodes), 1},
    {"gpus_per_node", offsetof(par_cluster_t, gpus_per_node), 1},
    CF(gpu_mem_bytes), CF(gpu_mem_bw),
    {"peak_flops.fp32", offsetof(par_cluster_t, peak_flops) + 0 * sizeof(double), 0},
    {"peak_flops.bf16", offsetof(par_cluster_t, peak_flops) + 1 * sizeof(double), 0},
    {"peak_flops.fp16", offsetof(par_cluster_t, peak_flops) + 2 * sizeof(double), 0},
    {"gemm_efficiency.fp32", offsetof(par_cluster_t, gemm_efficiency) + 0 * sizeof(double), 0},
    {"gemm_efficiency.bf16", offsetof(par_cluster_t, gemm_efficiency) + 1 * sizeof(double), 0},
    {"gemm_efficiency.fp16", offsetof(par_cluster_t, gemm_efficiency) + 2 * sizeof(double), 0},
    CF(intra_bw), CF(intra_lat), CF(inter_bw), CF(inter_lat), CF(host_bw), CF(cpu_mem_bytes),
    CF(cpu_mem_bw), CF(cpu_flops), CF(nvme_bytes), CF(nvme_bw),
};
#undef CF

#define PF(f) {#f, offsetof(par_plan_params_t, f), 0}
static const field_t param_fields[] = {
    PF(gemm_efficiency), PF(link_efficiency), PF(hbm_efficiency), PF(host_efficiency),
    PF(ew_passes_token), PF(ew_passes_token_replicated), PF(ew_passes_score),
    PF(act_token_elems), PF(act_token_elems_replicated), PF(act_score_elems),
    PF(bwd_scratch_token_elems), PF(bwd_scratch_token_elems_replicated), PF(mask_bytes), PF(act_elem_bytes),
    PF(head_chunk_bytes),
    PF(bwd_factor), PF(dp_overlap), PF(zero3_overlap), PF(offload_overlap), PF(cpu_adam_bytes),
    PF(cpu_adam_flops), PF(gpu_optim_bytes), PF(dp_bucket_bytes), PF(zero3_prefetch_layers), PF(zero3_prefetch_elems),
    PF(zero3_max_live_elems), PF(zero3_reuse_elems), PF(zero3_persist_elems), PF(embed_output_kept),
    PF(ckpt_cpu_overlap), PF(shard_align),
    PF(device_reserved_bytes), PF(cpu_reserved_bytes), PF(token_budget), PF(keep_stage_outputs), PF(pp_dp_overlap),
    PF(pp_scatter_gather),
};
#undef PF

#define N(a) ((int)(sizeof a / sizeof a[0]))

/* The valid range of every key of the tables above (tests/plan checks that
 * none lacks one): lo..hi, each bound inclusive or not, whole numbers only
 * where `whole`. Values must be finite besides. */
static const field_t *find(const field_t *f, int n, const char *key);

typedef struct {
  const char *key;
  double lo, hi;
  int lo_open, hi_open, whole;
} range_t;

#define BIG HUGE_VAL
#define POS(k) {k, 0, BIG, 1, 1, 0}      /* > 0 */
#define NONNEG(k) {k, 0, BIG, 0, 1, 0}   /* >= 0 */
#define FRAC(k) {k, 0, 1, 1, 0, 0}       /* (0, 1] */
#define UNIT(k) {k, 0, 1, 0, 0, 0}       /* [0, 1] */
static const range_t cluster_ranges[] = {
    {"nodes", 1, 1e6, 0, 0, 1}, {"gpus_per_node", 1, 1024, 0, 0, 1},
    POS("gpu_mem_bytes"), POS("gpu_mem_bw"), POS("peak_flops.fp32"), NONNEG("peak_flops.bf16"),
    NONNEG("peak_flops.fp16"), POS("intra_bw"), NONNEG("intra_lat"), POS("inter_bw"), NONNEG("inter_lat"),
    POS("host_bw"), POS("cpu_mem_bytes"), POS("cpu_mem_bw"), POS("cpu_flops"), NONNEG("nvme_bytes"),
    NONNEG("nvme_bw"), UNIT("gemm_efficiency.fp32"), UNIT("gemm_efficiency.bf16"), UNIT("gemm_efficiency.fp16"),
};
static const range_t param_ranges[] = {
    FRAC("gemm_efficiency"), FRAC("link_efficiency"), FRAC("hbm_efficiency"), FRAC("host_efficiency"),
    NONNEG("ew_passes_token"), NONNEG("ew_passes_token_replicated"), NONNEG("ew_passes_score"),
    NONNEG("act_token_elems"), NONNEG("act_token_elems_replicated"), NONNEG("act_score_elems"),
    NONNEG("bwd_scratch_token_elems"), NONNEG("bwd_scratch_token_elems_replicated"), NONNEG("mask_bytes"),
    NONNEG("act_elem_bytes"), NONNEG("head_chunk_bytes"), POS("bwd_factor"), UNIT("dp_overlap"), UNIT("zero3_overlap"),
    UNIT("offload_overlap"), NONNEG("cpu_adam_bytes"), NONNEG("cpu_adam_flops"), NONNEG("gpu_optim_bytes"),
    NONNEG("dp_bucket_bytes"), NONNEG("zero3_prefetch_layers"), NONNEG("zero3_prefetch_elems"),
    NONNEG("zero3_max_live_elems"), NONNEG("zero3_reuse_elems"), NONNEG("zero3_persist_elems"),
    UNIT("embed_output_kept"), UNIT("ckpt_cpu_overlap"), {"shard_align", 0, 1 << 30, 0, 0, 1},
    NONNEG("device_reserved_bytes"), NONNEG("cpu_reserved_bytes"), POS("token_budget"),
    UNIT("keep_stage_outputs"), UNIT("pp_dp_overlap"), UNIT("pp_scatter_gather"),
};
#undef POS
#undef NONNEG
#undef FRAC
#undef UNIT

/* A number in a message: whole numbers in full (1000000, not 1e+06), others
 * as the shortest decimal that reads back the same. */
static par_num_t num(double v) {
  par_num_t r;
  if (isfinite(v) && v == floor(v) && fabs(v) < 1e15) snprintf(r.s, sizeof r.s, "%.0f", v);
  else r = par_num(v);
  return r;
}

static const range_t *find_range(const range_t *r, int n, const char *key) {
  for (int i = 0; key && i < n; i++)
    if (!strcmp(r[i].key, key)) return &r[i];
  return NULL;
}

/* "an integer in 1..1024", "in (0, 1]", "> 0", ">= 0" */
static void range_text(const range_t *r, char *buf, size_t n) {
  if (r->whole && r->hi < BIG) {
    snprintf(buf, n, "an integer in %s..%s", num(r->lo).s, num(r->hi).s);
  } else if (r->hi < BIG) {
    snprintf(buf, n, "in %c%s, %s%c", r->lo_open ? '(' : '[', num(r->lo).s, num(r->hi).s,
             r->hi_open ? ')' : ']');
  } else {
    snprintf(buf, n, "%s %s%s", r->lo_open ? ">" : ">=", num(r->lo).s, r->whole ? ", an integer" : "");
  }
}

static int in_range(const range_t *r, double v) {
  if (!isfinite(v)) return 0;
  if (r->lo_open ? v <= r->lo : v < r->lo) return 0;
  if (r->hi_open ? v >= r->hi : v > r->hi) return 0;
  return !r->whole || v == floor(v);
}

static int check(const range_t *ranges, int nr, const field_t *fields, int nf, const char *key, double v,
                 char *why, size_t n) {
  if (why && n) why[0] = '\0';
  const range_t *r = find_range(ranges, nr, key);
  if (!find(fields, nf, key) || !r) {
    if (why && n) snprintf(why, n, "unknown key '%s'", key ? key : "(null)");
    return STRATA_ENOTFOUND;
  }
  if (in_range(r, v)) return STRATA_OK;
  if (why && n) {
    char t[96];
    range_text(r, t, sizeof t);
    snprintf(why, n, "%s = %s: must be %s%s", key, num(v).s, t, isfinite(v) ? "" : " and finite");
  }
  return STRATA_EINVAL;
}

static const field_t *find(const field_t *f, int n, const char *key) {
  for (int i = 0; key && i < n; i++)
    if (!strcmp(f[i].key, key)) return &f[i];
  return NULL;
}

const char *par_cluster_key(int i) { return i >= 0 && i < N(cluster_fields) ? cluster_fields[i].key : NULL; }
const char *par_plan_params_key(int i) { return i >= 0 && i < N(param_fields) ? param_fields[i].key : NULL; }

static int set(void *base, const field_t *f, double v) {
  if (!f || !isfinite(v)) return STRATA_EINVAL;
  if (f->is_int) {
    if (v != floor(v) || v < INT_MIN || v > INT_MAX) return STRATA_EINVAL;
    *(int *)((char *)base + f->off) = (int)v;
  } else {
    *(double *)((char *)base + f->off) = v;
  }
  return STRATA_OK;
}

static int get(const void *base, const field_t *f, double *v) {
  if (!f || !v) return STRATA_EINVAL;
  *v = f->is_int ? (double)*(const int *)((const char *)base + f->off)
                 : *(const double *)((const char *)base + f->off);
  return STRATA_OK;
}

int par_cluster_check(const char *key, double value, char *why, size_t n) {
  return check(cluster_ranges, N(cluster_ranges), cluster_fields, N(cluster_fields), key, value, why, n);
}

int par_cluster_set(par_cluster_t *c, const char *key, double value) {
  if (!c) return STRATA_EINVAL;
  int rc = par_cluster_check(key, value, NULL, 0);
  if (rc) return rc;
  return set(c, find(cluster_fields, N(cluster_fields), key), value);
}

int par_cluster_get(const par_cluster_t *c, const char *key, double *value) {
  if (!c) return STRATA_EINVAL;
  const field_t *f = find(cluster_fields, N(cluster_fields), key);
  if (!f) return STRATA_ENOTFOUND;
  return get(c, f, value);
}

int par_plan_params_check(const char *key, double value, char *why, size_t n) {
  return check(param_ranges, N(param_ranges), param_fields, N(param_fields), key, value, why, n);
}

int par_plan_params_set(par_plan_params_t *p, const char *key, double value) {
  if (!p) return STRATA_EINVAL;
  int rc = par_plan_params_check(key, value, NULL, 0);
  if (rc) return rc;
  return set(p, find(param_fields, N(param_fields), key), value);
}

int par_plan_params_validate(const par_plan_params_t *p, char *why, size_t n) {
  if (why && n) why[0] = '\0';
  if (!p) {
    if (why && n) snprintf(why, n, "parameters are NULL");
    return STRATA_EINVAL;
  }
  for (int i = 0; i < N(param_fields); i++) {
    double v = 0;
    get(p, &param_fields[i], &v);
    int rc = par_plan_params_check(param_fields[i].key, v, why, n);
    if (rc) return rc == STRATA_ENOTFOUND ? STRATA_EINVAL : rc;
  }
  const struct {
    const char *part, *whole;
    double pv, wv;
  } shares[] = {
      {"ew_passes_token_replicated", "ew_passes_token", p->ew_passes_token_replicated, p->ew_passes_token},
      {"act_token_elems_replicated", "act_token_elems", p->act_token_elems_replicated, p->act_token_elems},
      {"bwd_scratch_token_elems_replicated", "bwd_scratch_token_elems", p->bwd_scratch_token_elems_replicated,
       p->bwd_scratch_token_elems},
  };
  for (size_t i = 0; i < sizeof shares / sizeof shares[0]; i++)
    if (shares[i].pv > shares[i].wv) {
      if (why && n)
        snprintf(why, n,
                 "%s = %s: must be at most %s = %s (it is the share of that which tensor parallelism "
                 "leaves whole)",
                 shares[i].part, num(shares[i].pv).s, shares[i].whole, num(shares[i].wv).s);
      return STRATA_EINVAL;
    }
  return STRATA_OK;
}

int par_plan_params_get(const par_plan_params_t *p, const char *key, double *value) {
  if (!p) return STRATA_EINVAL;
  const field_t *f = find(param_fields, N(param_fields), key);
  if (!f) return STRATA_ENOTFOUND;
  return get(p, f, value);
}

void par_plan_params_engine(par_plan_params_t *p) {
  if (!p) return;
  *p = (par_plan_params_t)PAR_PLAN_PARAMS_DEFAULTS;
  p->act_token_elems = 16, p->act_score_elems = 0, p->mask_bytes = 0, p->bwd_scratch_token_elems = 14;
  p->device_reserved_bytes = 0, p->dp_bucket_bytes = 0;
  p->act_elem_bytes = 4; /* fp32 compute under every precision */
  p->keep_stage_outputs = 1, p->pp_dp_overlap = 1, p->pp_scatter_gather = 0;
  p->embed_output_kept = 1;     /* x[0] besides each block's output x[l+1] */
  p->zero3_prefetch_layers = 2; /* ZeRO-3: the embeddings all pass, the region in use and the next */
  p->zero3_persist_elems = 0;   /* every region is sharded */
}

void par_plan_params_engine_device(par_plan_params_t *p, int act_bytes) {
  if (!p) return;
  par_plan_params_engine(p);
  p->act_elem_bytes = act_bytes == 2 ? 2 : 4;
  p->head_chunk_bytes = (double)TENSOR_CLASSIFIER_CHUNK_BYTES; /* gpt.c fuses the head on a device */
}
