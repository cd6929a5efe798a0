/* Fields of par_cluster_t and par_plan_params_t by name, so that Lua
 * tables (recipes/clusters/NAME.lua, a recipe's planner overrides) map onto the
 * C structs through one table of names kept next to the structs' meaning. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <math.h>

#include <strata/parallel.h>

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
    PF(bwd_factor), PF(dp_overlap), PF(zero3_overlap), PF(offload_overlap), PF(cpu_adam_bytes),
    PF(cpu_adam_flops), PF(gpu_optim_bytes), PF(dp_bucket_bytes), PF(zero3_prefetch_layers), PF(zero3_prefetch_elems),
    PF(zero3_max_live_elems), PF(zero3_reuse_elems), PF(zero3_persist_elems), PF(embed_output_kept),
    PF(ckpt_cpu_overlap), PF(shard_align),
    PF(device_reserved_bytes), PF(cpu_reserved_bytes), PF(token_budget), PF(keep_stage_outputs), PF(pp_dp_overlap),
    PF(pp_scatter_gather),
};
#undef PF

#define N(a) ((int)(sizeof a / sizeof a[0]))

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
    if (v != floor(v) || v < 0 || v > 1e9) return STRATA_EINVAL;
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

int par_cluster_set(par_cluster_t *c, const char *key, double value) {
  if (!c) return STRATA_EINVAL;
  const field_t *f = find(cluster_fields, N(cluster_fields), key);
  if (!f) return STRATA_ENOTFOUND;
  return set(c, f, value);
}

int par_cluster_get(const par_cluster_t *c, const char *key, double *value) {
  if (!c) return STRATA_EINVAL;
  const field_t *f = find(cluster_fields, N(cluster_fields), key);
  if (!f) return STRATA_ENOTFOUND;
  return get(c, f, value);
}

int par_plan_params_set(par_plan_params_t *p, const char *key, double value) {
  if (!p) return STRATA_EINVAL;
  const field_t *f = find(param_fields, N(param_fields), key);
  if (!f) return STRATA_ENOTFOUND;
  return set(p, f, value);
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
