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
  if (a->layout.offload_optimizer != b->layout.offload_optimizer)
    return (int)a->layout.offload_optimizer - (int)b->layout.offload_optimizer;
  if (a->layout.precision != b->layout.precision) return (int)a->layout.precision - (int)b->layout.precision;
  if (a->layout.schedule != b->layout.schedule) return (int)a->layout.schedule - (int)b->layout.schedule;
  return a->layout.interleave - b->layout.interleave;
}

par_precision_t par_plan_default_precision(const par_cluster_t *c) {
  if (c && c->peak_flops[PAR_PREC_BF16] > 0) return PAR_PREC_BF16;
  if (c && c->peak_flops[PAR_PREC_FP16] > 0) return PAR_PREC_FP16;
  return PAR_PREC_FP32;
}

/* The (schedule, interleave) pairs tried with pp stages of `layers`: 1F1B
 * alone without a pipeline; with one, each schedule of the mask, the
 * interleaved one with each chunk count of its mask (or every v >= 2 that
 * divides a stage's layers). */
static int schedules_of(const par_search_opts_t *o, int layers, int pp, int sched[], int inter[]) {
  int n = 0;
  if (pp == 1) {
    sched[0] = PAR_SCHED_1F1B, inter[0] = 1;
    return 1;
  }
  int mask = o->schedules ? o->schedules : 1 << PAR_SCHED_1F1B;
  for (int s = PAR_SCHED_GPIPE; s <= PAR_SCHED_INTERLEAVED; s++) {
    if (!(mask & (1 << s))) continue;
    if (s != PAR_SCHED_INTERLEAVED) {
      sched[n] = s, inter[n++] = 1;
      continue;
    }
    for (int v = 2; v <= 30; v++) {
      int tried = o->interleaves ? (o->interleaves >> v) & 1 : layers % pp == 0 && (layers / pp) % v == 0;
      if (tried) sched[n] = s, inter[n++] = v;
    }
  }
  return n;
}

int par_plan_search(const par_gpt_config_t *m, const par_cluster_t *c, const par_plan_params_t *p,
                    const par_search_opts_t *o, par_plan_entry_t *out, size_t cap, size_t *total) {
  if (total) *total = 0;
  if (!m || !c || !total || (cap && !out)) return STRATA_EINVAL;
  if (par_cluster_validate(c, NULL, 0)) return STRATA_EINVAL;
  if (p && par_plan_params_validate(p, NULL, 0)) return STRATA_EINVAL;
  par_search_opts_t opt = PAR_SEARCH_OPTS_DEFAULTS;
  if (o) opt = *o;
  if (opt.global_batch < 1) return STRATA_EINVAL;
  if (opt.max_microbatch < 1) opt.max_microbatch = 1;
  if (opt.max_microbatch > 1 << 29) opt.max_microbatch = 1 << 29; /* mbs doubles past it in an int */
  if (opt.tp_modes == 0) opt.tp_modes = 1 << PAR_TP_1D;
  if (opt.precisions == 0) opt.precisions = 1 << par_plan_default_precision(c);
  if (opt.max_zero_stage < 0 || opt.max_zero_stage > 3 || opt.tp_modes & ~0xf || opt.precisions & ~0x7 ||
      opt.schedules & ~0x7 || opt.interleaves & ~0x7ffffffc)
    return STRATA_EINVAL;
  int world = c->nodes * c->gpus_per_node;
  int sched[32], inter[32];
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
              int nsched = schedules_of(&opt, m->layers, pp, sched, inter);
              for (int off = 0; off <= (opt.try_offload ? 1 : 0); off++) {
                for (int prec = PAR_PREC_FP32; prec <= PAR_PREC_FP16; prec++) {
                  if (!(opt.precisions & (1 << prec))) continue;
                  for (int si = 0; si < nsched; si++) {
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
                        l.precision = (par_precision_t)prec;
                        l.schedule = (par_schedule_t)sched[si];
                        l.interleave = inter[si];
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
    }
  }
  qsort(e.v, e.n, sizeof *e.v, cmp_entries);
  *total = e.n;
  if (cap) memcpy(out, e.v, (cap < e.n ? cap : e.n) * sizeof *out);
fail:
  free(e.v);
  return rc;
}

/* A reason with each number (digits, a fraction, an exponent) as '#'. */
static void mask_numbers(const char *why, char *out, size_t n) {
  size_t k = 0;
  for (const char *s = why; *s && k + 1 < n;) {
    if (*s >= '0' && *s <= '9') {
      while (*s >= '0' && *s <= '9') s++;
      if (s[0] == '.' && s[1] >= '0' && s[1] <= '9')
        for (s++; *s >= '0' && *s <= '9';) s++;
      if ((s[0] == 'e' || s[0] == 'E') &&
          ((s[1] >= '0' && s[1] <= '9') || ((s[1] == '+' || s[1] == '-') && s[2] >= '0' && s[2] <= '9')))
        for (s += 2; *s >= '0' && *s <= '9';) s++;
      out[k++] = '#';
    } else {
      out[k++] = *s++;
    }
  }
  out[k] = '\0';
}

typedef struct {
  par_plan_cause_t c;
  int rank; /* of its first entry: too big (1) before invalid (2) */
} cause_t;

static int cmp_causes(const void *pa, const void *pb) {
  const cause_t *a = pa, *b = pb;
  if (a->rank != b->rank) return a->rank - b->rank;
  if (a->c.count != b->c.count) return a->c.count > b->c.count ? -1 : 1;
  return a->c.first < b->c.first ? -1 : a->c.first > b->c.first;
}

int par_plan_search_causes(const par_plan_entry_t *e, size_t count, par_plan_cause_t *out, size_t cap,
                           size_t *n) {
  if (n) *n = 0;
  if (!n || (count && !e) || (cap && !out)) return STRATA_EINVAL;
  cause_t *c = NULL;
  size_t nc = 0, cc = 0;
  for (size_t i = 0; i < count; i++) {
    if (e[i].plan.fits) continue;
    char key[sizeof c->c.cause];
    mask_numbers(e[i].plan.why, key, sizeof key);
    size_t j = 0;
    while (j < nc && strcmp(c[j].c.cause, key)) j++;
    if (j == nc) {
      if (nc == cc) {
        size_t cap2 = cc ? 2 * cc : 16;
        cause_t *g = realloc(c, cap2 * sizeof *g);
        if (!g) {
          free(c);
          return STRATA_ENOMEM;
        }
        c = g, cc = cap2;
      }
      memcpy(c[nc].c.cause, key, sizeof key);
      c[nc].c.count = 0;
      c[nc].c.first = i;
      c[nc++].rank = rank(&e[i]);
    }
    c[j].c.count++;
  }
  if (nc) qsort(c, nc, sizeof *c, cmp_causes);
  for (size_t i = 0; i < cap && i < nc; i++) out[i] = c[i].c;
  *n = nc;
  free(c);
  return STRATA_OK;
}
