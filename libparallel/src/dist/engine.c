/* The training engine: model, optimizer and data-parallel communicator of
 * one rank, with step, evaluate, save and load (strata/par_train.h).
 *
 * Plain data parallelism: every rank holds the whole model and optimizer
 * state, computes its share of the global batch, and the gradients are
 * averaged with one allreduce before the update. Resume is exact: the
 * checkpoint holds the parameters, the optimizer state and step, and the
 * data position, and the computation is deterministic for a given rank and
 * thread count, so the losses after a resume are bit-identical to an
 * uninterrupted run. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"

int engine_fail(par_engine_t *e, int all, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->err, sizeof e->err, fmt, ap);
  va_end(ap);
  e->err_all = all;
  return code;
}

const char *par_engine_error(const par_engine_t *e) { return e ? e->err : "no engine"; }
int par_engine_error_all_ranks(const par_engine_t *e) { return e ? e->err_all : 1; }
par_gpt_t *par_engine_model(par_engine_t *e) { return e ? e->model : NULL; }
comm_t *par_engine_comm(par_engine_t *e) { return e ? e->comm : NULL; }

double engine_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *par_engine_describe(const par_engine_t *e, const char *what) {
  if (!e || !what) return "";
  if (!strcmp(what, "model")) return e->model_desc;
  if (!strcmp(what, "optim")) return e->optim_desc;
  if (!strcmp(what, "optim_name")) return e->optim_name;
  if (!strcmp(what, "layout")) return e->layout_desc;
  return "";
}

/* ------------------------------------------------------------ optimizer */

static const char *const optim_names[] = {"adamw", "sgd", "momentum", "nesterov", "lamb", "lars", NULL};
static const int optim_kinds[] = {OPTIM_ADAMW, OPTIM_SGD, OPTIM_SGD, OPTIM_SGD, OPTIM_LAMB, OPTIM_LARS};
static const char *const sched_names[] = {"constant", "cosine", "linear", NULL};
static const int sched_kinds[] = {OPTIM_SCHED_CONSTANT, OPTIM_SCHED_COSINE, OPTIM_SCHED_POLY};

static int lookup(const char *const *names, const char *name) {
  for (int i = 0; name && names[i]; i++)
    if (!strcmp(names[i], name)) return i;
  return -1;
}

/* The optimizer with two groups (decayed matrices and embeddings; biases and
 * layernorms without decay or layer adaptation), its schedule, its state
 * (m for all but plain SGD, v for AdamW and LAMB) and one optim_tensor per
 * model view. */
static int setup_optimizer(par_engine_t *e, const par_optim_config_t *c) {
  int which = lookup(optim_names, c->name), sk = lookup(sched_names, c->schedule);
  if (which < 0)
    return engine_fail(e, 1, STRATA_EINVAL,
                       "optimizer '%s' is unknown (adamw, sgd, momentum, nesterov, lamb, lars)",
                       c->name ? c->name : "(null)");
  if (sk < 0)
    return engine_fail(e, 1, STRATA_EINVAL, "schedule '%s' is unknown (constant, cosine, linear)",
                       c->schedule ? c->schedule : "(null)");
  if (!(c->lr > 0) || !(c->min_lr >= 0) || c->min_lr > c->lr)
    return engine_fail(e, 1, STRATA_EINVAL, "learning rates lr = %g, min_lr = %g: need 0 <= min_lr <= lr, lr > 0",
                       c->lr, c->min_lr);
  if (!(c->clip >= 0) || c->warmup < 0)
    return engine_fail(e, 1, STRATA_EINVAL, "clip = %g and warmup = %ld must be >= 0", c->clip,
                       c->warmup);
  int kind = optim_kinds[which];
  snprintf(e->optim_name, sizeof e->optim_name, "%s", optim_names[which]);
  e->clip = c->clip;
  optim_config oc = OPTIM_CONFIG_DEFAULTS;
  oc.kind = kind;
  oc.threads = e->opts.threads;
  char err[512] = "";
  if (optim_create(&e->opt, &oc, err, sizeof err) != STRATA_OK)
    return engine_fail(e, 1, STRATA_EINVAL, "optimizer: %s", err);
  optim_group g = optim_group_defaults(kind);
  g.lr = (float)c->lr;
  g.weight_decay = (float)c->weight_decay;
  g.beta1 = (float)c->beta1;
  g.beta2 = (float)c->beta2;
  g.eps = (float)c->eps;
  g.momentum = which == 1 ? 0.0f : (float)c->momentum;
  g.nesterov = which == 3;
  int id0, id1;
  if (optim_add_group(e->opt, &g, &id0) != STRATA_OK)
    return engine_fail(e, 1, STRATA_EINVAL, "optimizer: %s", optim_last_error(e->opt));
  optim_group nd = g;
  nd.weight_decay = 0;
  nd.adapt = 0;
  if (optim_add_group(e->opt, &nd, &id1) != STRATA_OK)
    return engine_fail(e, 1, STRATA_EINVAL, "optimizer: %s", optim_last_error(e->opt));
  optim_schedule s = OPTIM_SCHEDULE_DEFAULTS;
  s.kind = sched_kinds[sk];
  s.warmup = c->warmup;
  s.total = e->opts.steps;
  s.power = 1.0;
  s.end = c->min_lr / c->lr;
  /* A decay needs steps after the warm-up; a run no longer than its warm-up
   * stays at the peak. */
  if (s.kind != OPTIM_SCHED_CONSTANT && s.total <= s.warmup) s.kind = OPTIM_SCHED_CONSTANT;
  if (optim_set_schedule(e->opt, &s) != STRATA_OK)
    return engine_fail(e, 1, STRATA_EINVAL, "optimizer schedule: %s", optim_last_error(e->opt));

  size_t n = 0;
  float *params = par_gpt_params(e->model, &n);
  const float *grads = par_gpt_grads(e->model, NULL);
  int need_m = !(kind == OPTIM_SGD && g.momentum == 0);
  int need_v = kind == OPTIM_ADAMW || kind == OPTIM_LAMB;
  if ((need_m && !(e->m = calloc(n, sizeof *e->m))) || (need_v && !(e->v = calloc(n, sizeof *e->v))))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for the optimizer state (%zu parameters)", n);
  e->state_bytes = ((need_m ? n : 0) + (need_v ? n : 0)) * sizeof(float);
  e->nt = par_gpt_num_views(e->model);
  if (!(e->tens = calloc((size_t)e->nt, sizeof *e->tens)) || !(e->sq = calloc((size_t)e->nt, sizeof *e->sq)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for %d optimizer tensors", e->nt);
  for (int i = 0; i < e->nt; i++) {
    const par_gpt_view_t *v = par_gpt_view(e->model, i);
    e->tens[i] = (optim_tensor){.param = params + v->offset, .grad = grads + v->offset,
                                .m = e->m ? e->m + v->offset : NULL,
                                .v = e->v ? e->v + v->offset : NULL,
                                .group = v->decay ? id0 : id1, .n = v->numel};
  }
  snprintf(e->optim_desc, sizeof e->optim_desc,
           "%s lr=%g min_lr=%g schedule=%s warmup=%ld weight_decay=%g beta1=%g beta2=%g eps=%g "
           "momentum=%g clip=%g",
           e->optim_name, g.lr, c->min_lr, sched_names[sk], s.warmup, g.weight_decay, g.beta1,
           g.beta2, g.eps, g.momentum, e->clip);
  return STRATA_OK;
}

/* ------------------------------------------------------------ create */

static int create(par_engine_t *e, const par_gpt_config_t *mc, const par_layout_t *lay,
                  const par_optim_config_t *oc) {
  char why[512];
  MPI_Comm world = e->opts.comm == MPI_COMM_NULL ? MPI_COMM_WORLD : e->opts.comm;
  comm_config_t cc = COMM_CONFIG_DEFAULTS;
  cc.timeout_s = e->opts.collective_timeout_s;
  if (comm_from_mpi(&e->comm, world, &cc) != STRATA_OK)
    return engine_fail(e, 0, STRATA_EMPI, "cannot attach libcomm to the run's MPI communicator");
  comm_set_name(e->comm, "dp");
  e->rank = comm_rank(e->comm), e->size = comm_size(e->comm);
  if (par_layout_validate(mc, lay, e->size, why, sizeof why) != STRATA_OK)
    return engine_fail(e, 1, STRATA_EINVAL, "layout: %s", why);
  if (lay->tp != 1 || lay->pp != 1 || lay->sp != 1 || lay->zero_stage != 0)
    return engine_fail(e, 1, STRATA_EUNSUPPORTED,
                       "layout tp %d, pp %d, sp %d, zero %d: this engine trains data parallel "
                       "only (tp = pp = sp = 1, zero = 0)",
                       lay->tp, lay->pp, lay->sp, lay->zero_stage);
  e->accum = lay->global_batch / (lay->dp * lay->microbatch); /* >= 1: validated */
  snprintf(e->model_desc, sizeof e->model_desc, "layers=%d hidden=%d heads=%d seq=%d vocab=%d",
           mc->layers, mc->hidden, mc->heads, mc->seq, mc->vocab);
  snprintf(e->layout_desc, sizeof e->layout_desc,
           "dp=%d tp=1 pp=1 sp=1 zero=0 ranks=%d threads=%d", lay->dp, e->size, e->opts.threads);
  par_gpt_options_t go = PAR_GPT_OPTIONS_DEFAULTS;
  go.threads = e->opts.threads;
  if (par_gpt_create_ex(&e->model, mc, &go, e->opts.seed) != STRATA_OK)
    return engine_fail(e, 1, STRATA_EINVAL, "model: %s", par_gpt_create_error());
  int rc = setup_optimizer(e, oc);
  if (rc != STRATA_OK) return rc;
  size_t bt = (size_t)lay->microbatch * (size_t)mc->seq;
  if (!(e->in = malloc(bt * sizeof *e->in)) || !(e->tg = malloc(bt * sizeof *e->tg)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for a batch of %zu tokens", bt);
  return STRATA_OK;
}

int par_engine_create(par_engine_t **out, const par_gpt_config_t *mc, const par_layout_t *lay,
                      const par_optim_config_t *oc, const par_engine_options_t *opts, char *err,
                      size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out || !mc || !lay || !oc) {
    if (err && errlen) snprintf(err, errlen, "par_engine_create: NULL argument");
    return STRATA_EINVAL;
  }
  *out = NULL;
  par_engine_t *e = calloc(1, sizeof *e);
  if (!e) {
    if (err && errlen) snprintf(err, errlen, "par_engine_create: out of memory");
    return STRATA_ENOMEM;
  }
  par_engine_options_t od = PAR_ENGINE_OPTIONS_DEFAULTS;
  e->opts = opts ? *opts : od;
  e->mc = *mc;
  e->layout = *lay;
  int rc = create(e, mc, lay, oc);
  if (rc != STRATA_OK) {
    if (err && errlen) snprintf(err, errlen, "%s", e->err);
    par_engine_destroy(e);
    return rc;
  }
  *out = e;
  return STRATA_OK;
}

void par_engine_destroy(par_engine_t *e) {
  if (!e) return;
  par_gpt_destroy(e->model);
  optim_destroy(e->opt);
  comm_destroy(e->comm);
  free(e->m), free(e->v), free(e->tens), free(e->sq), free(e->in), free(e->tg);
  free(e);
}

int par_engine_memory(const par_engine_t *e, size_t *current, size_t *peak) {
  size_t c = 0, p = 0;
  if (!e) return STRATA_EINVAL;
  int rc = par_gpt_memory(e->model, &c, &p);
  if (current) *current = c + e->state_bytes;
  if (peak) *peak = p + e->state_bytes;
  return rc;
}

/* ------------------------------------------------------------ steps */

static int model_fail(par_engine_t *e, int rc, const char *what) {
  return engine_fail(e, 0, rc, "%s: %s", what, par_gpt_last_error(e->model));
}

static int comm_failed(par_engine_t *e, int rc) {
  return engine_fail(e, 0, rc, "%s", comm_last_error(e->comm));
}

/* The gradient of the mean loss over the global batch: each microbatch's
 * backward accumulates the gradient of its own mean loss, so the sum over
 * the accum microbatches is scaled by 1/accum, and the ranks' results are
 * averaged (all microbatches hold the same number of targets). */
int par_engine_step(par_engine_t *e, par_data_t *data, par_step_t *out) {
  int rc;
  float loss, lr = 0;
  if (!e || !data || !out) return STRATA_EINVAL;
  double t0 = engine_now();
  int B = e->layout.microbatch;
  optim_current_lr(e->opt, 0, &lr);
  if ((rc = par_gpt_zero_grad(e->model)) != STRATA_OK) return model_fail(e, rc, "zero_grad");
  double l = 0;
  for (int k = 0; k < e->accum; k++) {
    if ((rc = par_data_next(data, e->rank, e->size, B, e->in, e->tg)) != STRATA_OK)
      return engine_fail(e, 0, rc, "data: %s", par_data_error(data));
    if ((rc = par_gpt_forward(e->model, e->in, e->tg, B, e->mc.seq, &loss)) != STRATA_OK)
      return model_fail(e, rc, "forward");
    if ((rc = par_gpt_backward(e->model)) != STRATA_OK) return model_fail(e, rc, "backward");
    l += loss;
  }
  size_t n = 0;
  float *grads = par_gpt_grads(e->model, &n);
  if (e->accum > 1) {
    const float inv = 1.0f / (float)e->accum;
    for (size_t i = 0; i < n; i++) grads[i] *= inv;
    l /= e->accum;
  }
  if (e->size > 1) {
    if ((rc = comm_allreduce(e->comm, grads, grads, n, COMM_F32, COMM_AVG)) != STRATA_OK ||
        (rc = comm_allreduce(e->comm, &l, &l, 1, COMM_F64, COMM_AVG)) != STRATA_OK)
      return comm_failed(e, rc);
  }
  double total = 0, gnorm = 0;
  if ((rc = optim_grad_sumsq(e->opt, e->sq, e->tens, e->nt)) != STRATA_OK)
    return engine_fail(e, 0, rc, "gradient norm: %s", optim_last_error(e->opt));
  for (int i = 0; i < e->nt; i++) total += e->sq[i];
  float scale;
  optim_grad_scale(total, 1.0f, (float)e->clip, &scale, &gnorm);
  /* The gradients are replicated: every rank sees the same norm. */
  if (!isfinite(gnorm))
    return engine_fail(e, 1, STRATA_EINVAL,
                       "the gradients are not finite (norm %g) at loss %g: lower optim.lr", gnorm, l);
  if ((rc = optim_step(e->opt, e->tens, e->nt, scale)) != STRATA_OK)
    return engine_fail(e, 0, rc, "optimizer: %s", optim_last_error(e->opt));
  out->loss = l;
  out->grad_norm = gnorm;
  out->lr = lr;
  out->seconds = engine_now() - t0;
  return STRATA_OK;
}

int par_engine_evaluate(par_engine_t *e, par_data_t *data, int batches, double *out) {
  int rc, B;
  if (!e || !data || !out || batches < 1) return STRATA_EINVAL;
  *out = NAN;
  if (par_data_samples(data, PAR_SPLIT_VAL) == 0) return STRATA_OK;
  B = e->layout.microbatch;
  double sum = 0;
  for (int k = e->rank; k < batches; k += e->size) {
    float loss;
    if ((rc = par_data_fill(data, PAR_SPLIT_VAL, (uint64_t)k * (uint64_t)B, B, e->in, e->tg)) != STRATA_OK)
      return engine_fail(e, 0, rc, "validation data: %s", par_data_error(data));
    if ((rc = par_gpt_forward(e->model, e->in, e->tg, B, e->mc.seq, &loss)) != STRATA_OK)
      return model_fail(e, rc, "validation");
    sum += loss;
  }
  if (e->size > 1 && (rc = comm_allreduce(e->comm, &sum, &sum, 1, COMM_F64, COMM_SUM)) != STRATA_OK)
    return comm_failed(e, rc);
  *out = sum / batches;
  return STRATA_OK;
}
