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

#endif
