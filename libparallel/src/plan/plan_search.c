/* Layout search: enumerate every valid way to lay a model over a whole
 * cluster, estimate each, rank by throughput among those that fit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

typedef struct {
  par_plan_entry_t *v;
  size_t n, cap;
} entries_t;

static int push(entries_t *e, const par_plan_entry_t *x) {
  if (e->n == e->cap) {
    size_t cap = e->cap ? 2 * e->cap : 256;
    par_plan_entry_t *v = realloc(e->v, cap * sizeof *v);
    if (!v) return STRATA_ENOMEM;
    e->v = v;
    e->cap = cap;
  }
  e->v[e->n++] = *x;
  return STRATA_OK;
}

/* Fitting first (tokens/s descending), then valid but too big (device
 * memory ascending), then invalid; ties broken by fewer pipeline stages and
 * smaller tensor degree, so the order is total and deterministic. */
static int rank(const par_plan_entry_t *x) { return x->plan.fits ? 0 : x->plan.valid ? 1 : 2; }
static int cmp_entries(const void *pa, const void *pb) {
  const par_plan_entry_t *a = pa, *b = pb;
  int ra = rank(a), rb = rank(b);
  if (ra != rb) return ra - rb;
  if (ra == 0 && a->plan.tokens_per_s != b->plan.tokens_per_s)
    return a->plan.tokens_per_s > b->plan.tokens_per_s ? -1 : 1;
  if (ra == 1 && a->plan.mem_total != b->plan.mem_total)
    return a->plan.mem_total < b->plan.mem_total ? -1 : 1;
  if (a->layout.pp != b->layout.pp) return a->layout.pp - b->layout.pp;
  if (a->layout.tp != b->layout.tp) return a->layout.tp - b->layout.tp;
  if (a->layout.tp_mode != b->layout.tp_mode) return (int)a->layout.tp_mode - (int)b->layout.tp_mode;
  if (a->layout.sp != b->layout.sp) return a->layout.sp - b->layout.sp;
  if (a->layout.zero_stage != b->layout.zero_stage) return a->layout.zero_stage - b->layout.zero_stage;
  if (a->layout.microbatch != b->layout.microbatch) return a->layout.microbatch - b->layout.microbatch;
  if (a->recompute != b->recompute) return a->recompute - b->recompute;
  return (int)a->layout.offload_optimizer - (int)b->layout.offload_optimizer;
}

int par_plan_search(const par_gpt_config_t *m, const par_cluster_t *c, const par_plan_params_t *p,
                    const par_search_opts_t *o, par_plan_entry_t *out, size_t cap, size_t *total) {
  if (total) *total = 0;
  if (!m || !c || !total || (cap && !out)) return STRATA_EINVAL;
  if (par_cluster_validate(c, NULL, 0)) return STRATA_EINVAL;
  par_search_opts_t opt = PAR_SEARCH_OPTS_DEFAULTS;
  if (o) opt = *o;
  if (opt.global_batch < 1) return STRATA_EINVAL;
  if (opt.max_microbatch < 1) opt.max_microbatch = 1;
  if (opt.tp_modes == 0) opt.tp_modes = 1 << PAR_TP_1D;
  if (opt.max_zero_stage < 0 || opt.max_zero_stage > 3) opt.max_zero_stage = 3;
  int world = c->nodes * c->gpus_per_node;
  entries_t e = {0};
  int rc = STRATA_OK;

  for (int mode = PAR_TP_1D; mode <= PAR_TP_3D; mode++) {
    if (!(opt.tp_modes & (1 << mode))) continue;
    for (int tp = 1; tp <= world; tp++) {
      if (world % tp) continue;
      /* 2.5d: every depth d > 1 with tp / d a square (d = 1 is 2d). */
      for (int depth = 1; depth <= tp; depth++) {
        if (mode != PAR_TP_2P5D && depth > 1) break;
        if (mode == PAR_TP_2P5D && (depth == 1 || tp % depth)) continue;
        /* tp = 1 is the same layout in every mode: enumerate it under 1d. */
        if (tp == 1 && mode != PAR_TP_1D) continue;
        for (int pp = 1; pp <= world / tp; pp++) {
          if ((world / tp) % pp) continue;
          for (int sp = 1; sp <= world / (tp * pp); sp++) {
            if ((world / (tp * pp)) % sp || (sp > 1 && !opt.try_sp)) continue;
            int dp = world / (tp * pp * sp);
            int nd = dp * sp;
            for (int zs = 0; zs <= opt.max_zero_stage; zs++) {
              if (nd == 1 && zs > 0) continue; /* nothing to shard over */
              for (int off = 0; off <= (opt.try_offload ? 1 : 0); off++) {
                for (int mbs = 1; mbs <= opt.max_microbatch; mbs *= 2) {
                  for (int rcmp = 0; rcmp <= 1; rcmp++) {
                    int recompute = opt.try_recompute ? rcmp : m->recompute;
                    if (!opt.try_recompute && rcmp) continue;
                    par_plan_entry_t x;
                    memset(&x, 0, sizeof x);
                    par_layout_t l = PAR_LAYOUT_DEFAULTS;
                    l.dp = dp;
                    l.tp = tp;
                    l.pp = pp;
                    l.sp = sp;
                    l.tp_mode = (par_tp_mode_t)mode;
                    l.tp_depth = depth;
                    l.zero_stage = zs;
                    l.microbatch = mbs;
                    l.global_batch = opt.global_batch;
                    l.precision = opt.precision;
                    l.schedule = pp > 1 ? opt.schedule : PAR_SCHED_1F1B;
                    if (off) l.offload_optimizer = l.offload_gradients = PAR_TIER_CPU;
                    par_gpt_config_t mm = *m;
                    mm.recompute = recompute;
                    x.layout = l;
                    x.recompute = recompute;
                    par_plan_estimate(&mm, &l, c, p, &x.plan);
                    rc = push(&e, &x);
                    if (rc) goto fail;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  qsort(e.v, e.n, sizeof *e.v, cmp_entries);
  *total = e.n;
  if (cap) memcpy(out, e.v, (cap < e.n ? cap : e.n) * sizeof *out);
fail:
  free(e.v);
  return rc;
}
