/* par_train_run: the training loop around the engine. Resume, steps,
 * evaluations, metrics rows (rank 0), checkpoints, progress reports. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

#define NMETRICS 8
static const char *const metric_names[NMETRICS] = {
    "step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "mem_peak", "comm_bytes"};

/* Metrics rows are written at most about once a second (and before every
 * checkpoint, evaluation and the end): opening the HDF5 file for each row
 * would cost a fifth of a small model's step, and a reader still sees the
 * run at most a second late. */
#define ROWS_MAX 4096

typedef struct {
  par_engine_t *e;
  par_data_t *data;
  const par_train_options_t *o;
  par_metrics_t *metrics; /* rank 0, when opts.metrics_path */
  double *rows;           /* [ROWS_MAX][NMETRICS] not yet written */
  int nrows;
  double last_flush;
} loop_t;

/* Rank 0: a new metrics file, or on resume the old one cut back to the
 * rows of steps <= start (rows after the checkpoint are recomputed). */
static int open_metrics(loop_t *lp, long start) {
  par_engine_t *e = lp->e;
  const char *path = lp->o->metrics_path;
  char err[600] = "", buf[64];
  int rc;
  if (start > 0) {
    double *steps = NULL;
    size_t n = 0, keep = 0;
    if (par_metrics_read(path, "step", &steps, &n, NULL, 0) == STRATA_OK) {
      while (keep < n && steps[keep] <= (double)start) keep++;
      free(steps);
      rc = par_metrics_open(path, metric_names, NMETRICS, keep, &lp->metrics, err, sizeof err);
      if (rc == STRATA_OK) goto attrs;
    }
  }
  rc = par_metrics_create(path, metric_names, NMETRICS, &lp->metrics, err, sizeof err);
  if (rc != STRATA_OK) return engine_fail(e, 0, rc, "%s", err);
attrs:
  for (int i = 0; i < lp->o->nattrs; i++)
    par_metrics_set_attr(lp->metrics, lp->o->attrs[i].name, lp->o->attrs[i].value);
  par_metrics_set_attr(lp->metrics, "model", e->model_desc);
  par_metrics_set_attr(lp->metrics, "optim", e->optim_desc);
  par_metrics_set_attr(lp->metrics, "layout", e->layout_desc);
  snprintf(buf, sizeof buf, "%llu", (unsigned long long)e->opts.seed);
  par_metrics_set_attr(lp->metrics, "seed", buf);
  double h = par_data_entropy_rate(lp->data);
  if (h > 0) {
    snprintf(buf, sizeof buf, "%.10g", h);
    par_metrics_set_attr(lp->metrics, "entropy_rate", buf);
  }
  if (start > 0) par_metrics_set_attr(lp->metrics, "resumed", "true");
  return STRATA_OK;
}

static int flush_rows(loop_t *lp, double t) {
  if (lp->nrows > 0 && par_metrics_append(lp->metrics, lp->rows, lp->nrows) != STRATA_OK)
    return engine_fail(lp->e, 0, STRATA_EHDF5, "%s", par_metrics_error(lp->metrics));
  lp->nrows = 0;
  lp->last_flush = t;
  return STRATA_OK;
}

static int check_options(par_engine_t *e, const par_train_options_t *o) {
  if (o->steps < 1 || o->eval_every < 0 || o->eval_batches < 1 || o->ckpt_every < 0 ||
      o->metrics_every < 1)
    return engine_fail(e, 1, STRATA_EINVAL,
                       "train options: steps %ld, eval_every %d, eval_batches %d, ckpt_every %ld, "
                       "metrics_every %ld out of range",
                       o->steps, o->eval_every, o->eval_batches, o->ckpt_every, o->metrics_every);
  if ((o->ckpt_every > 0 || o->ckpt_final) && !o->ckpt_path)
    return engine_fail(e, 1, STRATA_EINVAL, "train options: checkpoints asked for without a path");
  return STRATA_OK;
}

static int run(loop_t *lp, par_train_result_t *res) {
  par_engine_t *e = lp->e;
  const par_train_options_t *o = lp->o;
  int rc;
  long start = 0;
  if ((rc = check_options(e, o)) != STRATA_OK) return rc;
  if (o->resume) {
    if ((rc = par_engine_load(e, o->resume, lp->data, &start)) != STRATA_OK) {
      char why[sizeof e->err];
      snprintf(why, sizeof why, "%s", e->err);
      return engine_fail(e, e->err_all, rc, "cannot resume: %s", why);
    }
    if (start > o->steps)
      return engine_fail(e, 1, STRATA_EINVAL,
                         "cannot resume: checkpoint '%s' is at step %ld, beyond train.steps = %ld",
                         o->resume, start, o->steps);
  }
  res->start = res->step = start;
  if (e->rank == 0 && o->metrics_path) {
    if (!(lp->rows = malloc(ROWS_MAX * NMETRICS * sizeof *lp->rows)))
      return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for metrics rows");
    if ((rc = open_metrics(lp, start)) != STRATA_OK) return rc;
  }
  double t0 = engine_now();
  lp->last_flush = t0;
  /* tokens/s counts training time only (data, forward, backward, allreduce,
   * update), not evaluation, checkpoints or metrics I/O: tt is its clock,
   * and rates are averaged since the last metrics row / progress report. */
  double tt = 0, tt_row = 0, tt_rep = 0;
  long done = 0, steps_row = 0, steps_rep = 0;
  const double tokens_per_step = (double)e->layout.global_batch * e->mc.seq;
  par_progress_t p = {.rank = e->rank, .ranks = e->size, .step = start, .steps = o->steps,
                      .start = start, .loss = NAN, .val_loss = NAN, .last_val_loss = NAN,
                      .lr = NAN, .grad_norm = NAN, .last_ckpt_step = res->last_ckpt_step,
                      .begin = 1};
  if (o->progress) o->progress(o->ctx, &p);
  p.begin = 0;
  for (long step = start + 1; step <= o->steps; step++) {
    par_step_t st;
    if ((rc = par_engine_step(e, lp->data, &st)) != STRATA_OK) return rc;
    double t = engine_now();
    tt += st.seconds;
    done++, steps_row++, steps_rep++;
    res->step = step;
    res->loss = st.loss;
    int eval = (o->eval_every > 0 && step % o->eval_every == 0) || step == o->steps;
    double v = NAN;
    if (eval) {
      if ((rc = par_engine_evaluate(e, lp->data, o->eval_batches, &v)) != STRATA_OK) return rc;
      res->val_loss = p.last_val_loss = v;
    }
    size_t peak = 0;
    par_engine_memory(e, NULL, &peak);
    int ckpt = (o->ckpt_every > 0 && step % o->ckpt_every == 0) || (step == o->steps && o->ckpt_final);
    if (lp->metrics && (step % o->metrics_every == 0 || eval || step == o->steps)) {
      comm_counter_t cnt = {0};
      comm_counters(e->comm, COMM_K_ALLREDUCE, &cnt);
      double tps = tokens_per_step * (double)steps_row / (tt - tt_row);
      tt_row = tt, steps_row = 0;
      double row[NMETRICS] = {(double)step, st.loss, v, st.lr, st.grad_norm, tps, (double)peak,
                              (double)cnt.bytes_sent};
      memcpy(lp->rows + (size_t)lp->nrows * NMETRICS, row, sizeof row);
      lp->nrows++;
    }
    if (lp->metrics && (lp->nrows == ROWS_MAX || t - lp->last_flush >= 1.0 || eval || ckpt) &&
        (rc = flush_rows(lp, t)) != STRATA_OK)
      return rc;
    if (ckpt) {
      if ((rc = par_engine_save(e, o->ckpt_path, lp->data, step, o->attrs, o->nattrs)) != STRATA_OK)
        return rc;
      res->last_ckpt_step = step;
    }
    if (o->progress) {
      p.step = step;
      p.loss = st.loss, p.val_loss = v, p.lr = st.lr, p.grad_norm = st.grad_norm;
      p.tokens_per_s = tt > tt_rep ? tokens_per_step * (double)steps_rep / (tt - tt_rep) : 0;
      tt_rep = tt, steps_rep = 0;
      p.elapsed_s = engine_now() - t0;
      p.eta_s = p.elapsed_s / (double)done * (double)(o->steps - step);
      p.mem_peak = peak;
      p.evaluated = eval, p.saved = ckpt;
      p.last_ckpt_step = res->last_ckpt_step;
      o->progress(o->ctx, &p);
    }
  }
  if (lp->metrics && (rc = flush_rows(lp, engine_now())) != STRATA_OK) return rc;
  res->train_seconds = tt;
  res->elapsed_seconds = engine_now() - t0;
  res->tokens_per_s = done > 0 && tt > 0 ? (double)done * tokens_per_step / tt : 0;
  return STRATA_OK;
}

int par_train_run(par_engine_t *e, par_data_t *data, const par_train_options_t *opts,
                  par_train_result_t *res) {
  par_train_result_t r0;
  if (!res) res = &r0;
  memset(res, 0, sizeof *res);
  res->loss = res->val_loss = NAN;
  res->last_ckpt_step = -1;
  if (!e || !data || !opts) return STRATA_EINVAL;
  loop_t lp = {.e = e, .data = data, .o = opts};
  int rc = run(&lp, res);
  par_metrics_destroy(lp.metrics);
  free(lp.rows);
  return rc;
}
