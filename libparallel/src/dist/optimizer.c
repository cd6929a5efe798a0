/* par_optim_create: a liboptim handle from a par_optim_config_t, shared by
 * the engine and by the Lua binding of hand-written loops, so that the two
 * read the same configuration the same way. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/optim.h>
#include <strata/parallel.h>

#include "num.h"

int engine_optim_create(optim **out, const par_optim_config_t *c, long steps, int threads, int device,
                        int groups[2], char *err, size_t errlen);

static const char *const optim_names[] = {"adamw", "sgd", "momentum", "nesterov", "lamb", "lars", NULL};
static const int optim_kinds[] = {OPTIM_ADAMW, OPTIM_SGD, OPTIM_SGD, OPTIM_SGD, OPTIM_LAMB, OPTIM_LARS};
static const char *const sched_names[] = {"constant", "cosine", "linear", NULL};
static const int sched_kinds[] = {OPTIM_SCHED_CONSTANT, OPTIM_SCHED_COSINE, OPTIM_SCHED_POLY};

static int lookup(const char *const *names, const char *name) {
  for (int i = 0; name && names[i]; i++)
    if (!strcmp(names[i], name)) return i;
  return -1;
}

static int fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t n, const char *fmt, ...) {
  if (err && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
  }
  return STRATA_EINVAL;
}

/* A value in [0, 1) that float32 keeps below 1 (0.9999999999 rounds to 1). */
static int check_unit(const char *what, double x, char *err, size_t n) {
  if (!(x >= 0 && x < 1)) return fail(err, n, "optim.%s = %s must lie in [0, 1)", what, par_num(x).s);
  if ((float)x >= 1.0f)
    return fail(err, n, "optim.%s = %s rounds to 1 in float32, the optimizer's precision; "
                "use at most %.8g", what, par_num(x).s, (double)nextafterf(1.0f, 0.0f));
  return STRATA_OK;
}

int par_optim_kind(const char *name) {
  int i = lookup(optim_names, name);
  return i < 0 ? -1 : optim_kinds[i];
}

int par_optim_create(optim **out, const par_optim_config_t *c, long steps, int threads,
                     int groups[2], char *err, size_t errlen) {
  return engine_optim_create(out, c, steps, threads, -1, groups, err, errlen);
}

/* par_optim_create for arrays on `device` (-1: host memory; N >= 0: cuda:N,
 * liboptim's multi-tensor kernels on the default stream, in order with the
 * model's work). */
int engine_optim_create(optim **out, const par_optim_config_t *c, long steps, int threads, int device,
                        int groups[2], char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out || !c || !groups) return fail(err, errlen, "par_optim_create: NULL argument");
  *out = NULL;
  int which = lookup(optim_names, c->name), sk = lookup(sched_names, c->schedule);
  if (which < 0)
    return fail(err, errlen, "optim.name = '%s' is unknown (adamw, sgd, momentum, nesterov, lamb, lars)",
                c->name ? c->name : "(null)");
  if (sk < 0)
    return fail(err, errlen, "optim.schedule = '%s' is unknown (constant, cosine, linear)",
                c->schedule ? c->schedule : "(null)");
  if (!(c->lr > 0) || isinf(c->lr)) return fail(err, errlen, "optim.lr = %s must be finite and > 0", par_num(c->lr).s);
  /* min_lr / lr is the schedule's end factor; IEEE division keeps it <= 1
   * exactly when min_lr <= lr, so min_lr = lr is a constant rate. */
  if (!(c->min_lr >= 0) || c->min_lr > c->lr)
    return fail(err, errlen, "optim.min_lr = %s must lie in [0, optim.lr = %s]", par_num(c->min_lr).s,
                par_num(c->lr).s);
  if (!(c->clip >= 0) || isinf(c->clip))
    return fail(err, errlen, "optim.clip = %s must be finite and >= 0 (0: no clipping)", par_num(c->clip).s);
  if (c->warmup < 0) return fail(err, errlen, "optim.warmup = %ld must be >= 0", c->warmup);
  if (steps < 1) return fail(err, errlen, "the run's length (%ld steps) must be >= 1", steps);
  int rc;
  if ((rc = check_unit("beta1", c->beta1, err, errlen)) || (rc = check_unit("beta2", c->beta2, err, errlen)) ||
      (rc = check_unit("momentum", c->momentum, err, errlen)))
    return rc;
  int kind = optim_kinds[which];
  optim_config oc = OPTIM_CONFIG_DEFAULTS;
  oc.kind = kind;
  oc.threads = threads;
  if (device >= 0) oc.device = OPTIM_CUDA, oc.cuda_device = device;
  optim *o = NULL;
  char why[512] = "";
  if ((rc = optim_create(&o, &oc, why, sizeof why)) != STRATA_OK) {
    fail(err, errlen, "optimizer: %s", why);
    return rc;
  }
  optim_group g = optim_group_defaults(kind);
  g.lr = (float)c->lr;
  g.weight_decay = (float)c->weight_decay;
  g.beta1 = (float)c->beta1;
  g.beta2 = (float)c->beta2;
  g.eps = (float)c->eps;
  g.momentum = which == 1 ? 0.0f : (float)c->momentum; /* "sgd" is plain SGD */
  g.nesterov = which == 3;
  optim_group nd = g; /* biases and layernorms: no decay, no layer adaptation */
  nd.weight_decay = 0;
  nd.adapt = 0;
  optim_schedule s = OPTIM_SCHEDULE_DEFAULTS;
  s.kind = sched_kinds[sk];
  s.warmup = c->warmup;
  s.total = steps;
  s.power = 1.0;
  s.end = c->min_lr / c->lr;
  /* A decay needs steps after the warm-up; a run no longer than its warm-up
   * stays at the peak. */
  if (s.kind != OPTIM_SCHED_CONSTANT && s.total <= s.warmup) s.kind = OPTIM_SCHED_CONSTANT;
  if ((rc = optim_add_group(o, &g, &groups[0])) != STRATA_OK ||
      (rc = optim_add_group(o, &nd, &groups[1])) != STRATA_OK ||
      (rc = optim_set_schedule(o, &s)) != STRATA_OK) {
    fail(err, errlen, "optimizer: %s", optim_last_error(o));
    optim_destroy(o);
    return rc;
  }
  *out = o;
  return STRATA_OK;
}

int par_optim_state_arrays(const par_optim_config_t *c) {
  int kind = par_optim_kind(c ? c->name : NULL);
  int plain_sgd = c && (!strcmp(c->name, "sgd") || (kind == OPTIM_SGD && c->momentum == 0));
  return (kind >= 0 && !plain_sgd ? 1 : 0) | (kind == OPTIM_ADAMW || kind == OPTIM_LAMB ? 2 : 0);
}

const char *par_optim_describe(const par_optim_config_t *c, char *buf, size_t n) {
  snprintf(buf, n,
           "%s lr=%g min_lr=%g schedule=%s warmup=%ld weight_decay=%g beta1=%g beta2=%g eps=%g "
           "momentum=%g clip=%g",
           c->name, (float)c->lr, c->min_lr, c->schedule, c->warmup, (float)c->weight_decay,
           (float)c->beta1, (float)c->beta2, (float)c->eps,
           !strcmp(c->name, "sgd") ? 0.0 : (double)(float)c->momentum, c->clip);
  return buf;
}
