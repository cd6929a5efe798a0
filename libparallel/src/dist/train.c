/* par_train_run: the training loop around the engine. Resume, steps,
 * evaluations, metrics rows (rank 0), checkpoints, progress reports. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_internal.h"

/* The columns of every run, then (LAMB, LARS) "trust.<view>": the trust
 * ratio of each adapted view in the step's update. */
#define NMETRICS 10
static const char *const metric_names[NMETRICS] = {"step",     "loss",       "val_loss",   "lr",
                                                   "grad_norm", "tokens_per_s", "mem_peak", "comm_bytes",
                                                   "loss_scale", "global_batch"};
/* Their units (the datasets' "unit" attribute; a plot draws one panel per unit). */
static const char *const metric_units[NMETRICS] = {"step",          "nats/token", "nats/token", "learning rate",
                                                   "gradient norm", "tokens/s",   "bytes",      "bytes",
                                                   "loss scale",    "sequences"};

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
  double *rows;           /* [ROWS_MAX][ncols] not yet written */
  int nrows;
  int failed;             /* a metrics write failed (its error joins the next step) */
  double last_flush;
  const par_attr_t *attrs; /* opts.attrs for checkpoints */
  int nattrs;
  const char **names; /* the columns: metric_names, then the trust ratios' */
  char *trust_names;  /* their storage */
  int ncols, nviews;
  int *trust_view;    /* view of each trust column */
  double *trust;      /* [nviews] */
} loop_t;

static void notice(loop_t *lp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Rank 0: a new metrics file, or on resume the old one cut back to the
 * rows of steps <= start (rows after the checkpoint are recomputed). An
 * old file that cannot be read or continued (damaged, or of other columns)
 * is kept aside as "<path>.unreadable" (".unreadable.2", ...), and said so:
 * its rows are never lost without a word. */
static int open_metrics(loop_t *lp, long start) {
  par_engine_t *e = lp->e;
  const char *path = lp->o->metrics_path;
  char err[600] = "", buf[64];
  int rc;
  if (start > 0 && access(path, F_OK) == 0) {
    double *steps = NULL;
    size_t n = 0, keep = 0;
    rc = par_metrics_read(path, "step", &steps, &n, err, sizeof err);
    if (rc == STRATA_OK) {
      while (keep < n && steps[keep] <= (double)start) keep++;
      free(steps);
      rc = par_metrics_open(path, lp->names, lp->ncols, keep, &lp->metrics, err, sizeof err);
      if (rc == STRATA_OK) goto attrs;
    }
    char aside[1100];
    snprintf(aside, sizeof aside, "%s.unreadable", path);
    for (int k = 2; access(aside, F_OK) == 0 && k < 1000; k++) snprintf(aside, sizeof aside, "%s.unreadable.%d", path, k);
    if (rename(path, aside) != 0)
      return engine_fail(e, 0, STRATA_EIO, "cannot continue metrics file '%s' (%s) nor move it aside to '%s': %s", path,
                         err, aside, strerror(errno));
    notice(lp, "%s: cannot be continued; kept as '%s', a new metrics file starts at step %ld", err, aside, start + 1);
  }
  rc = par_metrics_create(path, lp->names, lp->ncols, &lp->metrics, err, sizeof err);
  if (rc != STRATA_OK) return engine_fail(e, 0, rc, "%s", err);
attrs:
  for (int i = 0; i < NMETRICS; i++) par_metrics_set_unit(lp->metrics, metric_names[i], metric_units[i]);
  for (int i = NMETRICS; i < lp->ncols; i++) par_metrics_set_unit(lp->metrics, lp->names[i], "trust ratio");
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

/* Rank 0: appends the pending rows. A failure is this rank's alone, so it
 * is handed to the next step's reduction (engine_defer_error), which ends
 * every rank with it; the rows stay pending. */
static void flush_rows(loop_t *lp, double t) {
  if (!lp->metrics || lp->failed) return;
  if (lp->nrows > 0 && par_metrics_append(lp->metrics, lp->rows, lp->nrows) != STRATA_OK) {
    lp->failed = 1;
    engine_defer_error(lp->e, STRATA_EHDF5, par_metrics_error(lp->metrics));
    return;
  }
  lp->nrows = 0;
  lp->last_flush = t;
}

static void notice(loop_t *lp, const char *fmt, ...) {
  char msg[1600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (lp->e->wrank == 0 && lp->o->notice) lp->o->notice(lp->o->ctx, msg);
}

/* A save interrupted by a kill leaves "<path>.tmp" (the complete
 * checkpoint at <path> is untouched): rank 0 removes it and says so. */
static void remove_leftover(loop_t *lp) {
  const char *path = lp->o->ckpt_path;
  char tmp[1100];
  if (lp->e->wrank != 0 || !path) return;
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (access(tmp, F_OK) != 0) return;
  if (unlink(tmp) == 0) notice(lp, "removed '%s', left by a checkpoint save that did not finish", tmp);
  else notice(lp, "cannot remove '%s', left by a checkpoint save that did not finish: %s", tmp, strerror(errno));
}

/* Saves a checkpoint at step; under PAR_ON_ERROR_CONTINUE a failure every
 * rank shares is reported and the run goes on. */
static int save(loop_t *lp, long step, par_train_result_t *res) {
  par_engine_t *e = lp->e;
  const par_train_options_t *o = lp->o;
  int rc = par_engine_save(e, o->ckpt_path, lp->data, step, lp->attrs, lp->nattrs);
  if (rc == STRATA_OK) {
    res->last_ckpt_step = step;
    res->last_ckpt_path = o->ckpt_path;
    return STRATA_OK;
  }
  if (o->ckpt_on_error == PAR_ON_ERROR_CONTINUE && e->err_all) {
    notice(lp, "checkpoint at step %ld failed, training goes on: %s", step, e->err);
    return STRATA_OK;
  }
  return rc;
}

static int diverged(loop_t *lp, long step, const par_step_t *st, par_train_result_t *res) {
  par_engine_t *e = lp->e;
  double f = lp->o->diverge_factor, l0 = e->loss0;
  if ((st->skipped && !st->overflow) || !isfinite(st->loss)) {
    res->diverged = 1;
    char l[32], g[32];
    snprintf(l, sizeof l, isnan(st->loss) ? "NaN" : "%g", st->loss);
    snprintf(g, sizeof g, isnan(st->grad_norm) ? "NaN" : "%g", st->grad_norm);
    return engine_fail(e, 1, STRATA_EINVAL,
                       "the loss diverged at step %ld: loss %s, gradient norm %s (not finite; the "
                       "update was not applied) at learning rate %g",
                       step, l, g, st->lr);
  }
  if (f > 0 && isfinite(l0) && l0 > 0 && st->loss > f * l0) {
    res->diverged = 1;
    return engine_fail(e, 1, STRATA_EINVAL,
                       "the loss diverged at step %ld: %g nats/token, more than %g times the first "
                       "step's %.4f, at learning rate %g",
                       step, st->loss, f, l0, st->lr);
  }
  return STRATA_OK;
}

/* On resume: the settings of `what` ("key=value ..." descriptions) that
 * differ from the checkpoint's, in one notice (a new learning rate may be
 * meant; a new data seed changes which samples follow). */
static void resume_changes(loop_t *lp, const char *what, const char *then, const char *now) {
  char msg[1200] = "", a[512], b[512];
  if (!then[0] || !strcmp(then, now)) return;
  snprintf(a, sizeof a, "%s", now);
  for (char *save = NULL, *tok = strtok_r(a, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(tok, '=');
    if (!eq) continue;
    size_t kl = (size_t)(eq - tok) + 1; /* "key=" */
    const char *old = NULL;
    snprintf(b, sizeof b, " %s", then);
    for (char *p = b; (p = strstr(p, " ")) != NULL; p++)
      if (!strncmp(p + 1, tok, kl)) {
        old = p + 1 + kl;
        break;
      }
    size_t ol = old ? strcspn(old, " ") : 0;
    if (old && strlen(eq + 1) == ol && !strncmp(old, eq + 1, ol)) continue;
    size_t used = strlen(msg);
    snprintf(msg + used, sizeof msg - used, "%s%s (the checkpoint's %.*s)", used ? ", " : "", tok, (int)ol,
             old ? old : "none");
  }
  if (msg[0]) notice(lp, "resuming with %s settings other than the checkpoint's: %s", what, msg);
}

/* The metrics' columns: the common ones, and for LAMB and LARS one per
 * adapted view ("trust.h.0.attn.qkv.w") when the engine knows its ratios. */
static int columns(loop_t *lp) {
  par_engine_t *e = lp->e;
  int kind = par_optim_kind(e->optim_name), nv = par_gpt_num_views(e->model), nt = 0;
  int trust = (kind == OPTIM_LAMB || kind == OPTIM_LARS) && e->pp < 2 && !e->nvme && !e->chunks && !e->host_opt;
  size_t chars = 0;
  for (int v = 0; trust && v < nv; v++)
    if (par_gpt_view(e->model, v)->decay) nt++, chars += strlen(par_gpt_view(e->model, v)->name) + 7;
  lp->names = malloc((size_t)(NMETRICS + nt) * sizeof *lp->names);
  lp->trust_view = malloc((size_t)(nt + 1) * sizeof *lp->trust_view);
  lp->trust_names = malloc(chars + 1);
  lp->trust = malloc((size_t)(nv + 1) * sizeof *lp->trust);
  if (!lp->names || !lp->trust_view || !lp->trust_names || !lp->trust)
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for %d metrics columns", NMETRICS + nt);
  for (int i = 0; i < NMETRICS; i++) lp->names[i] = metric_names[i];
  char *at = lp->trust_names;
  lp->ncols = NMETRICS, lp->nviews = nv;
  for (int v = 0; trust && v < nv; v++) {
    if (!par_gpt_view(e->model, v)->decay) continue;
    lp->trust_view[lp->ncols - NMETRICS] = v;
    lp->names[lp->ncols++] = at;
    at += sprintf(at, "trust.%s", par_gpt_view(e->model, v)->name) + 1;
    for (char *c = (char *)lp->names[lp->ncols - 1]; *c; c++)
      if (*c == '/') *c = '.'; /* (metric names are datasets at the file's root) */
  }
  return STRATA_OK;
}

/* Batch warm-up: the schedule completed from the layout, and checked. */
static int batch_schedule(par_engine_t *e, const par_train_options_t *o, optim_batch_schedule *b) {
  char why[256];
  *b = o->batch;
  if (b->start <= 0) b->start = e->layout.global_batch;
  if (b->end <= 0) b->end = e->layout.global_batch;
  if (b->quantum <= 0) b->quantum = (long)e->layout.dp * e->layout.microbatch;
  if (b->seq <= 0) b->seq = e->seq;
  if (optim_batch_schedule_check(b, why, sizeof why) != STRATA_OK)
    return engine_fail(e, 1, STRATA_EINVAL, "train options: %s", why);
  if (o->lr_rule < OPTIM_LR_RULE_NONE || o->lr_rule > OPTIM_LR_RULE_SQRT || !(o->lr_batch >= 0))
    return engine_fail(e, 1, STRATA_EINVAL, "train options: learning-rate rule %d at batch %g", o->lr_rule,
                       o->lr_batch);
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
  optim_batch_schedule bs;
  if ((rc = check_options(e, o)) != STRATA_OK || (rc = batch_schedule(e, o, &bs)) != STRATA_OK ||
      (rc = columns(lp)) != STRATA_OK)
    return rc;
  const double lr_ref = o->lr_batch > 0 ? o->lr_batch : (double)bs.end;
  int scheduled = bs.start != bs.end || o->lr_rule != OPTIM_LR_RULE_NONE;
  long batch_now = e->layout.global_batch;
  double resume_s = 0;
  if (o->resume) {
    res->fail_phase = "resume";
    double tl = engine_now();
    rc = par_engine_load(e, o->resume, lp->data, &start);
    resume_s = engine_now() - tl;
    if (rc != STRATA_OK) {
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
  if (o->resume) {
    res->last_ckpt_step = start, res->last_ckpt_path = o->resume;
    char now[256];
    resume_changes(lp, "optimizer", e->ckpt_optim, e->optim_desc);
    resume_changes(lp, "data", e->ckpt_data, par_data_describe(lp->data, now, sizeof now));
  }
  remove_leftover(lp);
  res->fail_phase = "start";
  rc = STRATA_OK;
  if (e->wrank == 0 && o->metrics_path) {
    if (!(lp->rows = malloc((size_t)ROWS_MAX * (size_t)lp->ncols * sizeof *lp->rows)))
      rc = engine_fail(e, 0, STRATA_ENOMEM, "out of memory for metrics rows");
    else rc = open_metrics(lp, start);
  }
  if ((rc = engine_agree(e, rc)) != STRATA_OK) return rc; /* rank 0's metrics file */
  double t0 = engine_now();
  lp->last_flush = t0;
  /* tokens/s counts training time only (data, forward, backward, allreduce,
   * update), not evaluation, checkpoints or metrics I/O: tt is its clock,
   * and rates are averaged since the last metrics row / progress report. */
  double tt = 0, tt_row = 0, tt_rep = 0;
  long done = 0;
  double tok_row = 0, tok_rep = 0, tok_all = 0; /* tokens trained since the row, the report, the start */
  par_progress_t p = {.rank = e->wrank, .ranks = e->wsize, .step = start, .steps = o->steps,
                      .start = start, .loss = NAN, .val_loss = NAN, .last_val_loss = NAN,
                      .lr = NAN, .grad_norm = NAN, .last_ckpt_step = res->last_ckpt_step,
                      .begin = 1, .resume_s = resume_s};
  if (o->progress) o->progress(o->ctx, &p);
  p.begin = 0;
  for (long step = start + 1; step <= o->steps; step++) {
    par_step_t st;
    res->fail_phase = "step", res->fail_step = step;
    if (scheduled) { /* the step's batch and learning rate, from the step alone (resumes too) */
      long b = optim_batch_at(&bs, step - 1);
      if ((rc = par_engine_set_batch(e, (int)b, optim_lr_batch_factor(o->lr_rule, (double)b, lr_ref))) != STRATA_OK)
        return rc;
      batch_now = b;
    }
    if ((rc = par_engine_step(e, lp->data, &st)) != STRATA_OK) return rc;
    double tokens = (double)batch_now * e->seq;
    tok_row += tokens, tok_rep += tokens, tok_all += tokens;
    if ((rc = diverged(lp, step, &st, res)) != STRATA_OK) return rc;
    double t = engine_now();
    tt += st.seconds;
    done++;
    res->step = step;
    res->loss = st.loss;
    /* A stop request (every rank saw it in this step's reduction) skips the
     * evaluation and saves now. */
    int stop = st.stop;
    /* the next step's batch is the one to grow for: every rank computes the same */
    int grow = scheduled && o->stop_before_batch > 0 && step < o->steps &&
               optim_batch_at(&bs, step) >= o->stop_before_batch && batch_now < o->stop_before_batch;
    if (grow) stop = 1, res->grown = 1;
    int eval = !stop && ((o->eval_every > 0 && step % o->eval_every == 0) || step == o->steps);
    double v = NAN;
    if (eval) {
      res->fail_phase = "evaluation";
      if ((rc = par_engine_evaluate(e, lp->data, o->eval_batches, &v)) != STRATA_OK) return rc;
      res->val_loss = p.last_val_loss = v;
    }
    size_t peak = 0;
    par_engine_memory(e, NULL, &peak);
    int ckpt = (o->ckpt_every > 0 && step % o->ckpt_every == 0) || (step == o->steps && o->ckpt_final);
    if (lp->metrics && (step % o->metrics_every == 0 || eval || step == o->steps)) {
      double sent = 0; /* everything the data, tensor and pipeline groups sent */
      comm_t *groups[4] = {e->comm, e->tpc, e->ppc, e->embc};
      for (int k = 0; k < COMM_NKINDS; k++)
        for (int g = 0; g < 4; g++) {
          comm_counter_t cnt = {0};
          if (groups[g] && comm_counters(groups[g], (comm_kind_t)k, &cnt) == STRATA_OK) sent += (double)cnt.bytes_sent;
        }
      double tps = tok_row / (tt - tt_row);
      tt_row = tt, tok_row = 0;
      double row[NMETRICS] = {(double)step, st.loss, v, st.lr, st.grad_norm, tps, (double)peak, sent,
                              st.loss_scale, (double)batch_now};
      double *at = lp->rows + (size_t)lp->nrows * (size_t)lp->ncols;
      memcpy(at, row, sizeof row);
      if (lp->ncols > NMETRICS) {
        par_engine_trust_ratios(e, lp->trust, lp->nviews);
        for (int k = NMETRICS; k < lp->ncols; k++) at[k] = st.skipped ? NAN : lp->trust[lp->trust_view[k - NMETRICS]];
      }
      lp->nrows++;
    }
    if (stop && o->ckpt_path) ckpt = 1;
    if (lp->metrics && (lp->nrows == ROWS_MAX || t - lp->last_flush >= 1.0 || eval || ckpt || stop))
      flush_rows(lp, t);
    res->fail_phase = "checkpoint";
    if (ckpt && (rc = save(lp, step, res)) != STRATA_OK) return rc;
    if (o->progress) {
      p.step = step;
      p.loss = st.loss, p.val_loss = v, p.lr = st.lr, p.grad_norm = st.grad_norm;
      p.loss_scale = st.loss_scale, p.overflows += st.overflow;
      p.tokens_per_s = tt > tt_rep ? tok_rep / (tt - tt_rep) : 0;
      tt_rep = tt, tok_rep = 0;
      p.elapsed_s = engine_now() - t0;
      p.eta_s = p.elapsed_s / (double)done * (double)(o->steps - step);
      p.mem_peak = peak;
      p.evaluated = eval, p.saved = ckpt && res->last_ckpt_step == step;
      p.last_ckpt_step = res->last_ckpt_step;
      o->progress(o->ctx, &p);
    }
    if (stop) {
      res->stopped = 1;
      break;
    }
  }
  flush_rows(lp, engine_now());
  res->fail_phase = "end";
  /* The last rows' fate, or a failure no later step carried, is every rank's. */
  int pending = e->pending_rc;
  if (pending != STRATA_OK) snprintf(e->err, sizeof e->err, "%s", e->pending_msg);
  e->pending_rc = STRATA_OK;
  if ((rc = engine_agree(e, pending)) != STRATA_OK) return rc;
  res->train_seconds = tt;
  res->elapsed_seconds = engine_now() - t0;
  res->tokens_per_s = done > 0 && tt > 0 ? tok_all / tt : 0;
  res->fail_phase = NULL;
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
  loop_t lp = {.e = e, .data = data, .o = opts, .attrs = opts->attrs, .nattrs = opts->nattrs};
  par_engine_watch_stop(e, opts->stop);
  int rc = run(&lp, res);
  par_engine_watch_stop(e, NULL);
  par_metrics_destroy(lp.metrics);
  free(lp.rows), free(lp.names), free(lp.trust_names), free(lp.trust_view), free(lp.trust);
  return rc;
}
