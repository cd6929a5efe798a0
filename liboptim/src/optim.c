/* liboptim: handles, parameter groups, validation and the two-phase step.
 *
 * The host side computes every per-tensor scalar in double (schedule factor,
 * bias corrections, trust ratios from the reduced sums) and passes the
 * kernels one job per tensor; see internal.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/optim.h>

#include "internal.h"

struct optim {
  optim_config cfg;
  const optim_range_fn *kernels; /* CPU kernel table of the chosen ISA */
  int isa;
  optim_group *groups;
  int ngroups, capgroups;
  optim_schedule sched;
  long step;
  int pending;     /* LAMB: optim_partials advanced m and v, apply must follow */
  int in_step;     /* optim_step_begin: parts of one step, counted at optim_step_end */
  optim_job *jobs; /* scratch, capjobs long */
  int capjobs;
  char err[256];
};

static const char *kind_name(int kind) {
  switch (kind) {
  case OPTIM_SGD: return "SGD";
  case OPTIM_ADAMW: return "AdamW";
  case OPTIM_LAMB: return "LAMB";
  case OPTIM_LARS: return "LARS";
  default: return "?";
  }
}

int optim_fail_msg(char *buf, size_t len, int code, const char *fmt, ...) {
  if (buf && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
  }
  return code;
}
#define FAIL(o, code, ...) optim_fail_msg((o)->err, sizeof(o)->err, code, __VA_ARGS__)

const char *optim_strerror(int code) {
  return strata_status_string(code);
}

const char *optim_last_error(const optim *o) {
  return o ? o->err : "no handle";
}

int optim_isa_in_use(const optim *o) {
  return o ? o->isa : OPTIM_ISA_SCALAR;
}

optim_group optim_group_defaults(int kind) {
  optim_group g;
  memset(&g, 0, sizeof g);
  g.beta1 = 0.9f;
  g.beta2 = 0.999f;
  g.eps = 1e-8f;
  g.bias_correction = 1;
  g.adapt = 1;
  g.trust_coef = 1e-3f;
  switch (kind) {
  case OPTIM_SGD: g.lr = 0.01f; break;
  case OPTIM_ADAMW:
    g.lr = 1e-3f;
    g.weight_decay = 0.01f;
    break;
  case OPTIM_LAMB:
    g.lr = 1e-3f;
    g.weight_decay = 0.01f;
    g.eps = 1e-6f;
    break;
  case OPTIM_LARS:
    g.lr = 0.1f;
    g.momentum = 0.9f;
    g.weight_decay = 5e-4f;
    break;
  default: break;
  }
  return g;
}

int optim_create(optim **out, const optim_config *cfg, char *err, size_t errlen) {
  int rc = STRATA_OK;
  optim *o = NULL;
  optim_config c = OPTIM_CONFIG_DEFAULTS;
  if (err && errlen) err[0] = 0;
  if (!out) return optim_fail_msg(err, errlen, STRATA_EINVAL, "optim_create: out is NULL");
  *out = NULL;
  if (cfg) c = *cfg;
  if (c.kind < OPTIM_SGD || c.kind > OPTIM_LARS) {
    rc = optim_fail_msg(err, errlen, STRATA_EINVAL, "optim_create: kind %d is not an optim_kind",
                        c.kind);
    goto fail;
  }
  if (c.device != OPTIM_CPU && c.device != OPTIM_CUDA) {
    rc = optim_fail_msg(err, errlen, STRATA_EINVAL,
                        "optim_create: device %d is neither OPTIM_CPU nor OPTIM_CUDA", c.device);
    goto fail;
  }
  if (c.isa < OPTIM_ISA_AUTO || c.isa > OPTIM_ISA_AVX512 || c.threads < 0) {
    rc = optim_fail_msg(err, errlen, STRATA_EINVAL,
                        "optim_create: isa %d or threads %d out of range", c.isa, c.threads);
    goto fail;
  }
  if (c.device == OPTIM_CUDA) {
#ifdef STRATA_CUDA
    int n = optim_cuda_device_count();
    if (n <= 0) {
      rc = optim_fail_msg(err, errlen, STRATA_EUNSUPPORTED,
                          "optim_create: OPTIM_CUDA requested but no CUDA device is present");
      goto fail;
    }
    if (c.cuda_device < 0 || c.cuda_device >= n) {
      rc = optim_fail_msg(err, errlen, STRATA_EINVAL,
                          "optim_create: cuda_device %d, but %d device(s) present", c.cuda_device,
                          n);
      goto fail;
    }
#else
    rc = optim_fail_msg(err, errlen, STRATA_EUNSUPPORTED,
                        "optim_create: OPTIM_CUDA requested but strata was built without CUDA");
    goto fail;
#endif
  }
  int has512 = optim_cpu_has_avx512();
  if (c.isa == OPTIM_ISA_AVX512 && !has512) {
    rc = optim_fail_msg(err, errlen, STRATA_EUNSUPPORTED,
                        "optim_create: isa AVX512 requested but this CPU lacks AVX-512");
    goto fail;
  }
  o = calloc(1, sizeof *o);
  if (!o) {
    rc = optim_fail_msg(err, errlen, STRATA_ENOMEM, "optim_create: out of memory");
    goto fail;
  }
  o->cfg = c;
  o->isa = c.isa == OPTIM_ISA_AUTO ? (has512 ? OPTIM_ISA_AVX512 : OPTIM_ISA_AVX2) : c.isa;
  o->kernels = o->isa == OPTIM_ISA_AVX512 ? optim_kernels_avx512
               : o->isa == OPTIM_ISA_AVX2 ? optim_kernels_avx2
                                          : optim_kernels_scalar;
  o->sched = (optim_schedule)OPTIM_SCHEDULE_DEFAULTS;
  *out = o;
  o = NULL;
fail:
  free(o);
  return rc;
}

void optim_destroy(optim *o) {
  if (!o) return;
  free(o->groups);
  free(o->jobs);
  free(o);
}

static int check_unit(optim *o, const char *what, float x) {
  if (!(x >= 0.0f && x < 1.0f))
    return FAIL(o, STRATA_EINVAL, "optim: %s = %.9g must lie in [0, 1)", what, (double)x);
  return STRATA_OK;
}

static int validate_group(optim *o, const optim_group *g) {
  int rc = STRATA_OK;
  const char *k = kind_name(o->cfg.kind);
  if (!(g->lr >= 0.0f) || isinf(g->lr))
    return FAIL(o, STRATA_EINVAL, "optim %s: lr = %g must be finite and >= 0", k, (double)g->lr);
  if (!(g->weight_decay >= 0.0f) || isinf(g->weight_decay))
    return FAIL(o, STRATA_EINVAL, "optim %s: weight_decay = %g must be finite and >= 0", k,
                (double)g->weight_decay);
  if ((rc = check_unit(o, "momentum", g->momentum))) return rc;
  if ((rc = check_unit(o, "beta1", g->beta1))) return rc;
  if ((rc = check_unit(o, "beta2", g->beta2))) return rc;
  if (!(g->eps > 0.0f) || isinf(g->eps))
    return FAIL(o, STRATA_EINVAL, "optim %s: eps = %g must be finite and > 0", k, (double)g->eps);
  if (o->cfg.kind == OPTIM_SGD && g->nesterov && g->momentum == 0.0f)
    return FAIL(o, STRATA_EINVAL, "optim SGD: nesterov needs momentum > 0 (momentum = 0)");
  if (o->cfg.kind == OPTIM_LARS && !(g->trust_coef > 0.0f))
    return FAIL(o, STRATA_EINVAL, "optim LARS: trust_coef = %g must be > 0", (double)g->trust_coef);
  if (!(g->phi_min >= 0.0f) || !(g->phi_max >= 0.0f) ||
      (g->phi_max > 0.0f && g->phi_max < g->phi_min))
    return FAIL(o, STRATA_EINVAL, "optim %s: trust clamp [phi_min %g, phi_max %g] is not a range",
                k, (double)g->phi_min, (double)g->phi_max);
  return rc;
}

int optim_add_group(optim *o, const optim_group *hp, int *id) {
  int rc = STRATA_OK;
  if (!o) return STRATA_EINVAL;
  optim_group g = hp ? *hp : optim_group_defaults(o->cfg.kind);
  if ((rc = validate_group(o, &g))) goto fail;
  if (o->ngroups == o->capgroups) {
    int cap = o->capgroups ? 2 * o->capgroups : 8;
    optim_group *ng = realloc(o->groups, (size_t)cap * sizeof *ng);
    if (!ng) {
      rc = FAIL(o, STRATA_ENOMEM, "optim_add_group: out of memory");
      goto fail;
    }
    o->groups = ng;
    o->capgroups = cap;
  }
  o->groups[o->ngroups] = g;
  if (id) *id = o->ngroups;
  o->ngroups++;
fail:
  return rc;
}

int optim_set_group(optim *o, int id, const optim_group *hp) {
  int rc = STRATA_OK;
  if (!o || !hp) return STRATA_EINVAL;
  if (id < 0 || id >= o->ngroups)
    return FAIL(o, STRATA_ENOTFOUND, "optim_set_group: group %d does not exist (%d groups)", id,
                o->ngroups);
  if ((rc = validate_group(o, hp))) return rc;
  o->groups[id] = *hp;
  return rc;
}

int optim_get_group(const optim *o, int id, optim_group *hp) {
  if (!o || !hp || id < 0 || id >= o->ngroups) return STRATA_EINVAL;
  *hp = o->groups[id];
  return STRATA_OK;
}

long optim_get_step(const optim *o) {
  return o ? o->step : 0;
}

int optim_set_step(optim *o, long step) {
  if (!o) return STRATA_EINVAL;
  if (step < 0) return FAIL(o, STRATA_EINVAL, "optim_set_step: step = %ld must be >= 0", step);
  o->step = step;
  o->pending = 0, o->in_step = 0;
  return STRATA_OK;
}

/* ---- schedules ---- */

double optim_schedule_factor(const optim_schedule *s, long t) {
  if (!s) return 1.0;
  if (t < s->warmup) return (double)(t + 1) / (double)s->warmup;
  if (s->kind == OPTIM_SCHED_CONSTANT) return 1.0;
  double q = (double)(t - s->warmup) / (double)(s->total - s->warmup);
  if (q > 1.0) q = 1.0;
  if (s->kind == OPTIM_SCHED_POLY) return s->end + (1.0 - s->end) * pow(1.0 - q, s->power);
  return s->end + (1.0 - s->end) * 0.5 * (1.0 + cos(M_PI * q));
}

int optim_set_schedule(optim *o, const optim_schedule *s) {
  if (!o) return STRATA_EINVAL;
  optim_schedule c = OPTIM_SCHEDULE_DEFAULTS;
  if (s) c = *s;
  if (c.kind < OPTIM_SCHED_CONSTANT || c.kind > OPTIM_SCHED_COSINE)
    return FAIL(o, STRATA_EINVAL, "optim_set_schedule: kind %d is not a schedule", c.kind);
  if (c.warmup < 0)
    return FAIL(o, STRATA_EINVAL, "optim_set_schedule: warmup = %ld must be >= 0", c.warmup);
  if (c.kind != OPTIM_SCHED_CONSTANT && c.total <= c.warmup)
    return FAIL(o, STRATA_EINVAL, "optim_set_schedule: total = %ld must exceed warmup = %ld",
                c.total, c.warmup);
  if (c.kind == OPTIM_SCHED_POLY && !(c.power > 0.0))
    return FAIL(o, STRATA_EINVAL, "optim_set_schedule: power = %g must be > 0", c.power);
  if (!(c.end >= 0.0 && c.end <= 1.0))
    return FAIL(o, STRATA_EINVAL, "optim_set_schedule: end = %.17g must lie in [0, 1]", c.end);
  o->sched = c;
  return STRATA_OK;
}

int optim_current_lr(const optim *o, int id, float *lr) {
  if (!o || !lr || id < 0 || id >= o->ngroups) return STRATA_EINVAL;
  *lr = (float)((double)o->groups[id].lr * optim_schedule_factor(&o->sched, o->step));
  return STRATA_OK;
}

/* ---- clipping ---- */

int optim_grad_scale(double global_sumsq, float loss_scale, float max_norm, float *grad_scale,
                     double *norm) {
  if (!grad_scale || !(loss_scale > 0.0f) || isinf(loss_scale)) return STRATA_EINVAL;
  double nrm = sqrt(global_sumsq) / (double)loss_scale;
  if (norm) *norm = nrm;
  if (!isfinite(nrm)) {
    *grad_scale = 0.0f;
    return STRATA_OK;
  }
  double s = 1.0 / (double)loss_scale;
  if (max_norm > 0.0f) {
    double c = (double)max_norm / (nrm + 1e-6);
    if (c < 1.0) s *= c;
  }
  *grad_scale = (float)s;
  return STRATA_OK;
}

/* ---- the step ---- */

static int run(optim *o, int op, int nt, double *sums) {
  if (o->cfg.device == OPTIM_CUDA) {
#ifdef STRATA_CUDA
    return optim_cuda_run(o->cfg.cuda_device, o->cfg.stream, op, o->jobs, nt, sums, o->err,
                          sizeof o->err);
#else
    return FAIL(o, STRATA_EUNSUPPORTED, "optim: built without CUDA");
#endif
  }
  int rc = optim_cpu_run(o->kernels, op, o->jobs, nt, o->cfg.threads, sums);
  if (rc) FAIL(o, rc, "optim: out of memory for %d tensors", nt);
  return rc;
}

/* Checks the tensors and fills o->jobs with pointers, sizes and the
 * per-tensor constants of step t = o->step + 1 (trust ratios come later). */
static int prepare(optim *o, const optim_tensor *t, int nt, float grad_scale, int need_grad,
                   const char *fn) {
  const int kind = o->cfg.kind;
  if (nt < 0 || (nt > 0 && !t))
    return FAIL(o, STRATA_EINVAL, "%s: %d tensors at %p", fn, nt, (const void *)t);
  if (!isfinite(grad_scale) || grad_scale < 0.0f)
    return FAIL(o, STRATA_EINVAL, "%s: grad_scale = %g must be finite and >= 0", fn,
                (double)grad_scale);
  if (nt > o->capjobs) {
    optim_job *nj = realloc(o->jobs, (size_t)nt * sizeof *nj);
    if (!nj) return FAIL(o, STRATA_ENOMEM, "%s: out of memory for %d tensors", fn, nt);
    o->jobs = nj;
    o->capjobs = nt;
  }
  const double tt = (double)(o->step + 1);
  const double f = optim_schedule_factor(&o->sched, o->step);
  for (int i = 0; i < nt; i++) {
    const optim_tensor *x = &t[i];
    optim_job *j = &o->jobs[i];
    if (x->group < 0 || x->group >= o->ngroups)
      return FAIL(o, STRATA_EINVAL, "%s: tensor %d has group %d, but %d group(s) exist", fn, i,
                  x->group, o->ngroups);
    const optim_group *g = &o->groups[x->group];
    const int need_m = kind == OPTIM_ADAMW || kind == OPTIM_LAMB ||
                       ((kind == OPTIM_SGD || kind == OPTIM_LARS) && g->momentum > 0.0f);
    const int need_v = kind == OPTIM_ADAMW || kind == OPTIM_LAMB;
    if (x->n > 0 &&
        (!x->param || (need_grad && !x->grad) || (need_m && !x->m) || (need_v && !x->v)))
      return FAIL(o, STRATA_EINVAL,
                  "%s: tensor %d (n = %zu) lacks an array: param %p grad %p m %p v %p (%s group %d "
                  "needs%s%s)",
                  fn, i, x->n, (void *)x->param, (const void *)x->grad, (void *)x->m, (void *)x->v,
                  kind_name(kind), x->group, need_m ? " m" : "", need_v ? " v" : "");
    if (x->lowp_dtype < OPTIM_LOWP_NONE || x->lowp_dtype > OPTIM_LOWP_F16 ||
        (x->lowp_dtype != OPTIM_LOWP_NONE && x->n > 0 && !x->lowp))
      return FAIL(o, STRATA_EINVAL, "%s: tensor %d: lowp_dtype %d with lowp %p", fn, i,
                  x->lowp_dtype, x->lowp);
    memset(j, 0, sizeof *j);
    j->p = x->param;
    j->g = x->grad;
    j->m = need_m ? x->m : NULL;
    j->v = need_v ? x->v : NULL;
    j->lowp = x->lowp_dtype != OPTIM_LOWP_NONE ? x->lowp : NULL;
    j->lowp_dtype = x->lowp_dtype;
    j->n = x->n;
    j->nesterov = g->nesterov;
    j->lr = (float)((double)g->lr * f);
    j->wd = g->weight_decay;
    j->gs = grad_scale;
    j->eps = g->eps;
    j->c1 = 1.0f;
    j->c2 = 1.0f;
    if (kind == OPTIM_ADAMW || kind == OPTIM_LAMB) {
      j->b1 = g->beta1;
      j->b2 = g->beta2;
      if (g->bias_correction) {
        j->c1 = (float)(1.0 / (1.0 - pow((double)g->beta1, tt)));
        j->c2 = (float)(1.0 / sqrt(1.0 - pow((double)g->beta2, tt)));
      }
    } else {
      j->b1 = g->momentum;
    }
  }
  return STRATA_OK;
}

static int check_sums(optim *o, const double *sums, size_t nsums, int nt, const char *fn) {
  if (!sums || nsums != (size_t)OPTIM_NSUMS * (size_t)nt)
    return FAIL(o, STRATA_EINVAL, "%s: sums %p of length %zu, but %d tensors need %d", fn,
                (const void *)sums, nsums, nt, OPTIM_NSUMS * nt);
  return STRATA_OK;
}

int optim_partials(optim *o, double *sums, size_t nsums, const optim_tensor *t, int nt,
                   float grad_scale) {
  int rc = STRATA_OK;
  if (!o) return STRATA_EINVAL;
  if ((rc = check_sums(o, sums, nsums, nt, "optim_partials"))) goto fail;
  if ((rc = prepare(o, t, nt, grad_scale, 1, "optim_partials"))) goto fail;
  memset(sums, 0, nsums * sizeof *sums);
  if (o->cfg.kind == OPTIM_LAMB) {
    if (o->pending && !o->in_step) {
      rc = FAIL(o, STRATA_ESTATE,
                "optim_partials: LAMB phase one already ran for step %ld; call optim_apply",
                o->step + 1);
      goto fail;
    }
    if ((rc = run(o, OP_LAMB_PARTS, nt, sums))) goto fail;
    o->pending = 1;
  } else if (o->cfg.kind == OPTIM_LARS) {
    if ((rc = run(o, OP_LARS_PARTS, nt, sums))) goto fail;
  }
fail:
  return rc;
}

/* The trust ratio of a tensor from its reduced sums of squares (one formula
 * for optim_apply and optim_trust_ratio). */
static double trust_of(int kind, const optim_group *g, double sq0, double sq1) {
  const double xn = sqrt(sq0), un = sqrt(sq1);
  double trust = 1.0;
  if (!g->adapt) return 1.0;
  if (kind == OPTIM_LAMB) {
    /* You et al. 2020, Algorithm 2: phi(||x||) / ||r + lambda x||. */
    double phi = xn < g->phi_min ? g->phi_min : xn;
    if (g->phi_max > 0.0f && phi > g->phi_max) phi = g->phi_max;
    if (xn > 0.0 && un > 0.0) trust = phi / un;
  } else if (kind == OPTIM_LARS) {
    /* You, Gitman & Ginsburg 2017: eta ||w|| / (||g|| + beta ||w||). */
    if (xn > 0.0 && un > 0.0) trust = (double)g->trust_coef * xn / (un + (double)g->weight_decay * xn);
  }
  return trust;
}

int optim_trust_ratio(const optim *o, int id, double sumsq0, double sumsq1, double *trust) {
  if (!o || !trust || id < 0 || id >= o->ngroups) return STRATA_EINVAL;
  *trust = trust_of(o->cfg.kind, &o->groups[id], sumsq0, sumsq1);
  return STRATA_OK;
}

int optim_apply(optim *o, const optim_tensor *t, int nt, const double *sums, size_t nsums,
                float grad_scale) {
  int rc = STRATA_OK;
  if (!o) return STRATA_EINVAL;
  const int kind = o->cfg.kind;
  const int adaptive = kind == OPTIM_LAMB || kind == OPTIM_LARS;
  if (adaptive && (rc = check_sums(o, sums, nsums, nt, "optim_apply"))) goto fail;
  if (kind == OPTIM_LAMB && !o->pending) {
    rc = FAIL(o, STRATA_ESTATE, "optim_apply: LAMB needs optim_partials first (step %ld)",
              o->step + 1);
    goto fail;
  }
  if ((rc = prepare(o, t, nt, grad_scale, kind != OPTIM_LAMB, "optim_apply"))) goto fail;
  if (adaptive) {
    for (int i = 0; i < nt; i++) {
      const optim_group *g = &o->groups[t[i].group];
      if (!g->adapt) continue;
      double trust = trust_of(kind, g, sums[2 * i], sums[2 * i + 1]);
      if (!isfinite(trust)) {
        rc = FAIL(o, STRATA_EINVAL, "optim_apply: tensor %d: trust ratio %g from sums %g, %g", i,
                  trust, sums[2 * i], sums[2 * i + 1]);
        goto fail;
      }
      o->jobs[i].lr = (float)((double)o->jobs[i].lr * trust);
    }
  }
  static const int ops[] = {OP_SGD, OP_ADAMW, OP_LAMB, OP_LARS};
  if ((rc = run(o, ops[kind], nt, NULL))) goto fail;
  if (!o->in_step) { /* (between optim_step_begin and _end the step is counted at the end) */
    o->pending = 0;
    o->step++;
  }
fail:
  return rc;
}

int optim_step_begin(optim *o) {
  if (!o) return STRATA_EINVAL;
  if (o->in_step || o->pending)
    return FAIL(o, STRATA_ESTATE, "optim_step_begin: step %ld is %s", o->step + 1,
                o->in_step ? "already begun" : "half done (optim_partials without optim_apply)");
  o->in_step = 1;
  return STRATA_OK;
}

int optim_step_end(optim *o) {
  if (!o) return STRATA_EINVAL;
  if (!o->in_step) return FAIL(o, STRATA_ESTATE, "optim_step_end: no step begun (optim_step_begin)");
  o->in_step = 0, o->pending = 0;
  o->step++;
  return STRATA_OK;
}

int optim_step(optim *o, const optim_tensor *t, int nt, float grad_scale) {
  int rc = STRATA_OK;
  double *sums = NULL;
  if (!o) return STRATA_EINVAL;
  if (nt < 0) return FAIL(o, STRATA_EINVAL, "optim_step: nt = %d", nt);
  const size_t ns = (size_t)OPTIM_NSUMS * (size_t)nt;
  sums = calloc(ns ? ns : 1, sizeof *sums);
  if (!sums) {
    rc = FAIL(o, STRATA_ENOMEM, "optim_step: out of memory");
    goto fail;
  }
  if (o->cfg.kind == OPTIM_LAMB || o->cfg.kind == OPTIM_LARS) {
    if ((rc = optim_partials(o, sums, ns, t, nt, grad_scale))) goto fail;
  }
  rc = optim_apply(o, t, nt, sums, ns, grad_scale);
fail:
  free(sums);
  return rc;
}

int optim_grad_sumsq(optim *o, double *sumsq, const optim_tensor *t, int nt) {
  int rc = STRATA_OK;
  double *s2 = NULL;
  if (!o) return STRATA_EINVAL;
  if (!sumsq && nt > 0) return FAIL(o, STRATA_EINVAL, "optim_grad_sumsq: sumsq is NULL");
  if (nt < 0 || (nt > 0 && !t))
    return FAIL(o, STRATA_EINVAL, "optim_grad_sumsq: %d tensors at %p", nt, (const void *)t);
  if (nt > o->capjobs) {
    optim_job *nj = realloc(o->jobs, (size_t)nt * sizeof *nj);
    if (!nj) return FAIL(o, STRATA_ENOMEM, "optim_grad_sumsq: out of memory");
    o->jobs = nj;
    o->capjobs = nt;
  }
  for (int i = 0; i < nt; i++) {
    if (t[i].n > 0 && !t[i].grad)
      return FAIL(o, STRATA_EINVAL, "optim_grad_sumsq: tensor %d has no grad", i);
    memset(&o->jobs[i], 0, sizeof o->jobs[i]);
    o->jobs[i].g = t[i].grad;
    o->jobs[i].n = t[i].n;
  }
  s2 = malloc(2 * (size_t)(nt ? nt : 1) * sizeof *s2);
  if (!s2) {
    rc = FAIL(o, STRATA_ENOMEM, "optim_grad_sumsq: out of memory");
    goto fail;
  }
  if ((rc = run(o, OP_GRAD_SUMSQ, nt, s2))) goto fail;
  for (int i = 0; i < nt; i++)
    sumsq[i] = s2[2 * i];
fail:
  free(s2);
  return rc;
}
