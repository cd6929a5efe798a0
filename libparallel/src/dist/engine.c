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

/* The optimizer, its state (flat like the parameters) and one optim_tensor
 * per model view. */
static int setup_optimizer(par_engine_t *e, const par_optim_config_t *c) {
  int groups[2];
  char err[512];
  int rc = par_optim_create(&e->opt, c, e->opts.steps, e->opts.threads, groups, err, sizeof err);
  if (rc != STRATA_OK) return engine_fail(e, 1, rc, "%s", err);
  snprintf(e->optim_name, sizeof e->optim_name, "%s", c->name);
  par_optim_describe(c, e->optim_desc, sizeof e->optim_desc);
  e->clip = c->clip;
  size_t n = 0;
  float *params = par_gpt_params(e->model, &n);
  const float *grads = par_gpt_grads(e->model, NULL);
  int arrays = par_optim_state_arrays(c);
  if (((arrays & 1) && !(e->m = calloc(n, sizeof *e->m))) || ((arrays & 2) && !(e->v = calloc(n, sizeof *e->v))))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for the optimizer state (%zu parameters)", n);
  e->state_bytes = ((e->m ? n : 0) + (e->v ? n : 0)) * sizeof(float);
  e->nt = par_gpt_num_views(e->model);
  if (!(e->tens = calloc((size_t)e->nt, sizeof *e->tens)) || !(e->sq = calloc((size_t)e->nt, sizeof *e->sq)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for %d optimizer tensors", e->nt);
  for (int i = 0; i < e->nt; i++) {
    const par_gpt_view_t *v = par_gpt_view(e->model, i);
    e->tens[i] = (optim_tensor){.param = params + v->offset, .grad = grads + v->offset,
                                .m = e->m ? e->m + v->offset : NULL,
                                .v = e->v ? e->v + v->offset : NULL,
                                .group = groups[v->decay ? 0 : 1], .n = v->numel};
  }
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
  if (e->opts.init) {
    char err[1024];
    int rc = par_model_read(e->opts.init, e->model, err, sizeof err);
    if (rc != STRATA_OK) return engine_fail(e, 1, rc, "model.init: %s", err);
  }
  if (e->opts.seq < 0 || e->opts.seq > mc->seq)
    return engine_fail(e, 1, STRATA_EINVAL, "sequence length %d outside [1, %d] (the model's positions)",
                       e->opts.seq, mc->seq);
  e->seq = e->opts.seq ? e->opts.seq : mc->seq;
  int rc = setup_optimizer(e, oc);
  if (rc != STRATA_OK) return rc;
  size_t bt = (size_t)lay->microbatch * (size_t)e->seq;
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
  e->loss0 = NAN;
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

/* Makes this rank's status the run's: when any rank failed, every rank
 * returns the status and the message of the lowest failing rank (prefixed
 * with it), so all leave together instead of waiting for the failed one.
 * Collective; one small allreduce, plus a broadcast when something failed. */
int engine_agree(par_engine_t *e, int rc) {
  if (e->size == 1) {
    if (rc != STRATA_OK) e->err_all = 1;
    return rc;
  }
  int32_t in[2] = {rc != STRATA_OK ? e->rank : e->size, rc}, who[2];
  int crc = comm_allreduce(e->comm, who, in, 1, COMM_I32, COMM_MIN);
  if (crc != STRATA_OK) return comm_failed(e, crc);
  if (who[0] == e->size) return STRATA_OK;
  int32_t code = rc;
  char msg[sizeof e->err];
  snprintf(msg, sizeof msg, "%s", e->err);
  if ((crc = comm_broadcast(e->comm, &code, 1, COMM_I32, who[0])) != STRATA_OK ||
      (crc = comm_broadcast(e->comm, msg, sizeof msg, COMM_U8, who[0])) != STRATA_OK)
    return comm_failed(e, crc);
  msg[sizeof msg - 1] = 0;
  return engine_fail(e, 1, code, "[rank %d] %s", who[0], msg);
}

/* The step's local part: the gradient of the mean loss over this rank's
 * share of the global batch. Each microbatch's backward accumulates the
 * gradient of its own mean loss, so the sum over the accum microbatches is
 * scaled by 1/accum (all microbatches hold the same number of targets). */
static int local_step(par_engine_t *e, par_data_t *data, double *loss_out) {
  int rc, B = e->layout.microbatch;
  float loss;
  double l = 0;
  if ((rc = par_gpt_zero_grad(e->model)) != STRATA_OK) return model_fail(e, rc, "zero_grad");
  for (int k = 0; k < e->accum; k++) {
    if ((rc = par_data_next(data, e->rank, e->size, B, e->in, e->tg)) != STRATA_OK)
      return engine_fail(e, 0, rc, "data: %s", par_data_error(data));
    if ((rc = par_gpt_forward(e->model, e->in, e->tg, B, e->seq, &loss)) != STRATA_OK)
      return model_fail(e, rc, "forward");
    if ((rc = par_gpt_backward(e->model)) != STRATA_OK) return model_fail(e, rc, "backward");
    l += loss;
  }
  if (e->accum > 1) {
    size_t n = 0;
    float *grads = par_gpt_grads(e->model, &n);
    const float inv = 1.0f / (float)e->accum;
    for (size_t i = 0; i < n; i++) grads[i] *= inv;
  }
  *loss_out = l / e->accum;
  return STRATA_OK;
}

/* One step: the local part; the gradients averaged over the ranks; one
 * small allreduce that carries the loss, the stop flags and the local
 * failures together (a rank whose data or forward failed still takes part,
 * so that every rank leaves the step with the same status); clipping and
 * the update. A loss or gradient that is not finite skips the update. */
int par_engine_step(par_engine_t *e, par_data_t *data, par_step_t *out) {
  int rc;
  float lr = 0;
  if (!e || !data || !out) return STRATA_EINVAL;
  memset(out, 0, sizeof *out);
  double t0 = engine_now(), l = NAN;
  optim_current_lr(e->opt, 0, &lr);
  int local = local_step(e, data, &l);
  if (e->pending_rc != STRATA_OK && local == STRATA_OK) { /* from the loop: metrics, ... */
    local = e->pending_rc;
    snprintf(e->err, sizeof e->err, "%s", e->pending_msg);
  }
  e->pending_rc = STRATA_OK;
  size_t n = 0;
  float *grads = par_gpt_grads(e->model, &n);
  double ctl[3] = {l, e->stop_flag && *e->stop_flag ? 1 : 0, local != STRATA_OK ? 1 : 0};
  if (e->size > 1) {
    if ((rc = comm_allreduce(e->comm, grads, grads, n, COMM_F32, COMM_AVG)) != STRATA_OK ||
        (rc = comm_allreduce(e->comm, ctl, ctl, 3, COMM_F64, COMM_SUM)) != STRATA_OK)
      return comm_failed(e, rc);
    ctl[0] /= e->size;
  }
  if (ctl[2] > 0 && (rc = engine_agree(e, local)) != STRATA_OK) return rc;
  out->loss = ctl[0];
  out->stop = ctl[1] > 0;
  out->lr = lr;
  if (isnan(e->loss0)) e->loss0 = out->loss;
  double total = 0, gnorm = 0;
  if ((rc = optim_grad_sumsq(e->opt, e->sq, e->tens, e->nt)) != STRATA_OK)
    return engine_fail(e, 0, rc, "gradient norm: %s", optim_last_error(e->opt));
  for (int i = 0; i < e->nt; i++) total += e->sq[i];
  float scale;
  optim_grad_scale(total, 1.0f, (float)e->clip, &scale, &gnorm);
  out->grad_norm = gnorm;
  /* The loss and the gradients are replicated: every rank decides alike. */
  if (!isfinite(gnorm) || !isfinite(out->loss)) {
    out->skipped = 1;
  } else if ((rc = optim_step(e->opt, e->tens, e->nt, scale)) != STRATA_OK) {
    return engine_fail(e, 0, rc, "optimizer: %s", optim_last_error(e->opt));
  }
  out->seconds = engine_now() - t0;
  return STRATA_OK;
}

void par_engine_watch_stop(par_engine_t *e, const volatile sig_atomic_t *flag) {
  if (e) e->stop_flag = flag;
}

void engine_defer_error(par_engine_t *e, int rc, const char *msg) {
  if (e->pending_rc != STRATA_OK) return; /* the first one counts */
  e->pending_rc = rc;
  snprintf(e->pending_msg, sizeof e->pending_msg, "%s", msg);
}

double par_engine_initial_loss(const par_engine_t *e) { return e ? e->loss0 : NAN; }

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
    if ((rc = par_gpt_forward(e->model, e->in, e->tg, B, e->seq, &loss)) != STRATA_OK)
      return model_fail(e, rc, "validation");
    sum += loss;
  }
  if (e->size > 1 && (rc = comm_allreduce(e->comm, &sum, &sum, 1, COMM_F64, COMM_SUM)) != STRATA_OK)
    return comm_failed(e, rc);
  *out = sum / batches;
  return STRATA_OK;
}
