/* Internal helpers shared by the planner's sources (plan_*.c). */
#ifndef STRATA_PLAN_INTERNAL_H
#define STRATA_PLAN_INTERNAL_H

#include <strata/parallel.h>

/* The link a communication group uses: per-GPU bandwidth (bytes/s, after
 * link_efficiency), per-message latency (s), group size, inter-node or not. */
typedef struct {
  double bw, lat;
  int size, inter;
} plan_link_t;

const par_plan_params_t *plan_params_or_default(const par_plan_params_t *p);
void plan_group_link(const par_cluster_t *c, const par_plan_params_t *p, int stride, int size,
                     plan_link_t *out);
double plan_allreduce_time(const plan_link_t *k, double bytes);
double plan_gather_time(const plan_link_t *k, double bytes);
int plan_tp_q(const par_layout_t *l);
const char *plan_mode_name(par_tp_mode_t m);
/* Bytes each device sends for one linear layer (forward + backward) under a
 * tensor mode: rows x hin input, rows x hout output, hin x hout weights, e
 * bytes per element. */
double plan_tp_linear_bytes(par_tp_mode_t mode, int tp, int depth, double rows, double hin,
                            double hout, double e);

/* Calibrates gemm_efficiency on Megatron's 1.7B row (the one row used). */
int plan_megatron_calibrate(const par_plan_params_t *p, double *eff);

/* strata's engine under 2D, 2.5D and 3D tensor parallelism (plan_tp_layer.c):
 * the elements a rank holds of the embedding region, of each block and of
 * the final layernorm, and the activation bytes it holds for a microbatch. */
void plan_md_regions(const par_gpt_config_t *m, const par_layout_t *l, double *r0, double *blk, double *rl);
double plan_md_activations(const par_gpt_config_t *m, const par_layout_t *l);

#endif
