/* strata.train(cfg, data): the training loop behind strata.experiment.
 *
 * Serial and plain data parallel: every rank holds the whole model, reads
 * its own part of each global batch (par_data_next), and gradients are
 * averaged with libcomm's allreduce before one optimizer step (liboptim,
 * global-norm clipping, learning-rate schedule). Rank 0 writes metrics and
 * shows progress; checkpoints are written by all ranks together, each its
 * own contiguous range of every array, so a checkpoint saved with N ranks
 * loads with any other number.
 *
 * Resume is exact: the checkpoint holds the parameters, the optimizer state
 * and step, and the data position; the computation is deterministic for a
 * given rank and thread count, so the losses after a resume are
 * bit-identical to an uninterrupted run. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <strata/comm.h>
#include <strata/optim.h>
#include <strata/parallel.h>

#include "strata_lua.h"

par_data_t *lstrata_todata(lua_State *L, int idx);

#define RUN_MT "strata.run"
#define NMETRICS 8
static const char *const metric_names[NMETRICS] = {
    "step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "mem_peak", "comm_bytes"};

typedef struct {
  /* configuration */
  par_gpt_config_t mc;
  long steps, every_ckpt, eval_every, log_every, metrics_every;
  int batch, eval_batches, final_ckpt, resume_given;
  uint64_t seed;
  double clip;
  char name[128], optim_name[16], ckpt[1024], resume[1024], metrics_path[1024], plot[1024];
  char model_desc[256], optim_desc[512], layout[128];
  /* resources (freed by run_free, also on errors through __gc) */
  par_gpt_t *model;
  optim *opt;
  comm_t *comm;
  par_metrics_t *metrics;
  float *m, *v;
  optim_tensor *tens;
  double *sq; /* per-tensor sums of squares of the gradients */
  int nt;
  int32_t *in, *tg;
  double *rows; /* metrics rows not yet written (rank 0), [ROWS_MAX][NMETRICS] */
  int nrows;
  double last_flush;
  par_data_t *data; /* borrowed from the data userdata */
  int rank, size, dp, tty;
  double entropy;
} run_t;

static int run_free(lua_State *L) {
  run_t *r = luaL_checkudata(L, 1, RUN_MT);
  par_gpt_destroy(r->model);
  optim_destroy(r->opt);
  comm_destroy(r->comm);
  par_metrics_destroy(r->metrics);
  free(r->m);
  free(r->v);
  free(r->tens);
  free(r->sq);
  r->sq = NULL;
  free(r->in);
  free(r->tg);
  free(r->rows);
  r->rows = NULL;
  r->model = NULL, r->opt = NULL, r->comm = NULL, r->metrics = NULL;
  r->m = r->v = NULL, r->tens = NULL, r->in = r->tg = NULL;
  return 0;
}

/* Raises a run failure (exit status 1); `same` when every rank reports it. */
static int run_fail(lua_State *L, int same, const char *fmt, ...) {
  char msg[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  lua_createtable(L, 0, 3);
  lua_pushstring(L, msg);
  lua_setfield(L, -2, "message");
  lua_pushinteger(L, STRATA_EXIT_FAIL);
  lua_setfield(L, -2, "status");
  lua_pushboolean(L, same);
  lua_setfield(L, -2, "same_on_all_ranks");
  return lua_error(L);
}

/* ------------------------------------------------------------ config */

/* Pushes config[sec][key] (config is argument 1; sec NULL: the top level)
 * above the section; the reader pops both. */
static void cfg_push(lua_State *L, const char *sec, const char *key) {
  if (sec) lua_getfield(L, 1, sec);
  else lua_pushvalue(L, 1);
  lua_getfield(L, -1, key);
}
static lua_Integer cfg_int(lua_State *L, const char *sec, const char *key) {
  cfg_push(L, sec, key);
  lua_Integer v = luaL_checkinteger(L, -1);
  lua_pop(L, 2);
  return v;
}
static double cfg_num(lua_State *L, const char *sec, const char *key) {
  cfg_push(L, sec, key);
  double v = luaL_checknumber(L, -1);
  lua_pop(L, 2);
  return v;
}
static int cfg_bool(lua_State *L, const char *sec, const char *key) {
  cfg_push(L, sec, key);
  int v = lua_toboolean(L, -1);
  lua_pop(L, 2);
  return v;
}
static void cfg_str(lua_State *L, const char *sec, const char *key, char *out, size_t len) {
  cfg_push(L, sec, key);
  snprintf(out, len, "%s", lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "");
  lua_pop(L, 2);
}

/* mkdir -p of the folder holding path (best effort; errors show on open). */
static void make_parent(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", path);
  char *slash = strrchr(buf, '/');
  if (!slash) return;
  *slash = 0;
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(buf, 0777);
      *p = '/';
    }
  mkdir(buf, 0777);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_duration(char *buf, size_t len, double s) {
  if (!(s >= 0) || s > 1e7) snprintf(buf, len, "?");
  else if (s < 60) snprintf(buf, len, "%.0fs", s);
  else if (s < 3600) snprintf(buf, len, "%dm%02ds", (int)s / 60, (int)s % 60);
  else snprintf(buf, len, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

/* ------------------------------------------------------------ setup */

static void setup_optimizer(lua_State *L, run_t *r) {
  static const char *const names[] = {"adamw", "sgd", "momentum", "nesterov", "lamb", "lars", NULL};
  static const int kinds[] = {OPTIM_ADAMW, OPTIM_SGD, OPTIM_SGD, OPTIM_SGD, OPTIM_LAMB, OPTIM_LARS};
  int which = 0;
  for (int i = 0; names[i]; i++)
    if (!strcmp(names[i], r->optim_name)) which = i;
  int kind = kinds[which];
  optim_config oc = OPTIM_CONFIG_DEFAULTS;
  oc.kind = kind;
  oc.threads = lstrata_threads(NULL, NULL);
  char err[512] = "";
  if (optim_create(&r->opt, &oc, err, sizeof err) != STRATA_OK)
    run_fail(L, 1, "optimizer: %s", err);
  optim_group g = optim_group_defaults(kind);
  g.lr = (float)cfg_num(L, "optim", "lr");
  g.weight_decay = (float)cfg_num(L, "optim", "weight_decay");
  g.beta1 = (float)cfg_num(L, "optim", "beta1");
  g.beta2 = (float)cfg_num(L, "optim", "beta2");
  g.eps = (float)cfg_num(L, "optim", "eps");
  g.momentum = which == 1 ? 0.0f : (float)cfg_num(L, "optim", "momentum");
  g.nesterov = which == 3;
  int id0, id1;
  if (optim_add_group(r->opt, &g, &id0) != STRATA_OK)
    run_fail(L, 1, "optimizer: %s", optim_last_error(r->opt));
  optim_group nd = g; /* biases, layernorms, no decay and no layer adaptation */
  nd.weight_decay = 0;
  nd.adapt = 0;
  if (optim_add_group(r->opt, &nd, &id1) != STRATA_OK)
    run_fail(L, 1, "optimizer: %s", optim_last_error(r->opt));
  char sched[16];
  cfg_str(L, "optim", "schedule", sched, sizeof sched);
  optim_schedule s = OPTIM_SCHEDULE_DEFAULTS;
  s.kind = !strcmp(sched, "cosine") ? OPTIM_SCHED_COSINE
           : !strcmp(sched, "linear") ? OPTIM_SCHED_POLY
                                      : OPTIM_SCHED_CONSTANT;
  s.warmup = (long)cfg_int(L, "optim", "warmup");
  s.total = r->steps;
  s.power = 1.0;
  s.end = g.lr > 0 ? cfg_num(L, "optim", "min_lr") / g.lr : 0;
  if (s.kind != OPTIM_SCHED_CONSTANT && s.total <= s.warmup) s.kind = OPTIM_SCHED_CONSTANT;
  if (optim_set_schedule(r->opt, &s) != STRATA_OK)
    run_fail(L, 1, "optimizer schedule: %s", optim_last_error(r->opt));
  /* State: m for everything but plain SGD, v for AdamW and LAMB. */
  size_t n = 0;
  float *params = par_gpt_params(r->model, &n);
  const float *grads = par_gpt_grads(r->model, NULL);
  int need_m = !(kind == OPTIM_SGD && g.momentum == 0), need_v = kind == OPTIM_ADAMW || kind == OPTIM_LAMB;
  if ((need_m && !(r->m = calloc(n, sizeof *r->m))) || (need_v && !(r->v = calloc(n, sizeof *r->v))))
    run_fail(L, 1, "out of memory for the optimizer state (%zu parameters)", n);
  r->nt = par_gpt_num_views(r->model);
  if (!(r->tens = calloc((size_t)r->nt, sizeof *r->tens)) || !(r->sq = calloc((size_t)r->nt, sizeof *r->sq)))
    run_fail(L, 1, "out of memory");
  for (int i = 0; i < r->nt; i++) {
    const par_gpt_view_t *v = par_gpt_view(r->model, i);
    optim_tensor *t = &r->tens[i];
    t->param = params + v->offset;
    t->grad = grads + v->offset;
    t->m = r->m ? r->m + v->offset : NULL;
    t->v = r->v ? r->v + v->offset : NULL;
    t->group = v->decay ? id0 : id1;
    t->n = v->numel;
  }
  snprintf(r->optim_desc, sizeof r->optim_desc,
           "%s lr=%g min_lr=%g schedule=%s warmup=%ld weight_decay=%g beta1=%g beta2=%g eps=%g "
           "momentum=%g clip=%g",
           r->optim_name, g.lr, cfg_num(L, "optim", "min_lr"), sched, s.warmup, g.weight_decay,
           g.beta1, g.beta2, g.eps, g.momentum, r->clip);
}

/* ------------------------------------------------------------ checkpoints */

/* This rank's contiguous share [off, off+cnt) of n elements. */
static void share(size_t n, int rank, int size, int64_t *off, int64_t *cnt) {
  size_t lo = n * (size_t)rank / (size_t)size, hi = n * (size_t)(rank + 1) / (size_t)size;
  *off = (int64_t)lo, *cnt = (int64_t)(hi - lo);
}

static char recipe_text_buf[1 << 16];

static const char *recipe_text(lua_State *L) {
  const char *path = NULL;
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  if (lua_getfield(L, -1, "strata") == LUA_TTABLE && lua_getfield(L, -1, "recipe_path") == LUA_TSTRING)
    path = lua_tostring(L, -1);
  recipe_text_buf[0] = 0;
  FILE *f = path ? fopen(path, "r") : NULL;
  if (f) {
    size_t n = fread(recipe_text_buf, 1, sizeof recipe_text_buf - 1, f);
    recipe_text_buf[n] = 0;
    fclose(f);
  }
  lua_pop(L, 3);
  return recipe_text_buf;
}

#define CK(call)                                                                                   \
  do {                                                                                             \
    if ((rc = (call)) != STRATA_OK) goto done;                                                     \
  } while (0)

static int save_checkpoint(lua_State *L, run_t *r, long step, char *err, size_t errlen) {
  par_ckpt_t *c = NULL;
  char name[300];
  int rc = par_ckpt_create(r->ckpt, comm_mpi(r->comm), &c, err, errlen);
  if (rc != STRATA_OK) return rc;
  float *params = par_gpt_params(r->model, NULL);
  for (int i = 0; i < r->nt; i++) {
    const par_gpt_view_t *v = par_gpt_view(r->model, i);
    int64_t off, cnt;
    share(v->numel, r->rank, r->size, &off, &cnt);
    snprintf(name, sizeof name, "params/%s", v->name);
    CK(par_ckpt_write(c, name, v->ndim, v->shape, off, cnt, params + v->offset + off));
    if (r->m) {
      snprintf(name, sizeof name, "optim/m/%s", v->name);
      CK(par_ckpt_write(c, name, v->ndim, v->shape, off, cnt, r->m + v->offset + off));
    }
    if (r->v) {
      snprintf(name, sizeof name, "optim/v/%s", v->name);
      CK(par_ckpt_write(c, name, v->ndim, v->shape, off, cnt, r->v + v->offset + off));
    }
  }
  int64_t st = step, pos = (int64_t)par_data_position(r->data), ost = optim_get_step(r->opt);
  int64_t seed = (int64_t)r->seed;
  CK(par_ckpt_set_i64(c, "step", &st, 1));
  CK(par_ckpt_set_i64(c, "data_position", &pos, 1));
  CK(par_ckpt_set_i64(c, "optim_step", &ost, 1));
  CK(par_ckpt_set_i64(c, "seed", &seed, 1));
  CK(par_ckpt_set_str(c, "model", r->model_desc));
  CK(par_ckpt_set_str(c, "optim", r->optim_name));
  CK(par_ckpt_set_str(c, "optim_config", r->optim_desc));
  CK(par_ckpt_set_str(c, "layout", r->layout));
  CK(par_ckpt_set_str(c, "recipe", recipe_text(L)));
  CK(par_ckpt_set_str(c, "strata_version", STRATA_VERSION));
  CK(par_ckpt_commit(c));
done:
  if (rc != STRATA_OK) snprintf(err, errlen, "%s", par_ckpt_error(c));
  par_ckpt_close(c);
  return rc;
}

static int load_checkpoint(run_t *r, const char *path, long *step, char *err, size_t errlen) {
  par_ckpt_t *c = NULL;
  char name[300];
  int rc = par_ckpt_open(path, comm_mpi(r->comm), &c, err, errlen);
  if (rc != STRATA_OK) return rc;
  float *params = par_gpt_params(r->model, NULL);
  CK(par_ckpt_expect_str(c, "model", r->model_desc));
  CK(par_ckpt_expect_str(c, "optim", r->optim_name));
  for (int i = 0; i < r->nt; i++) { /* every rank reads all: data-parallel replicas */
    const par_gpt_view_t *v = par_gpt_view(r->model, i);
    snprintf(name, sizeof name, "params/%s", v->name);
    CK(par_ckpt_read(c, name, v->ndim, v->shape, 0, (int64_t)v->numel, params + v->offset));
    if (r->m) {
      snprintf(name, sizeof name, "optim/m/%s", v->name);
      CK(par_ckpt_read(c, name, v->ndim, v->shape, 0, (int64_t)v->numel, r->m + v->offset));
    }
    if (r->v) {
      snprintf(name, sizeof name, "optim/v/%s", v->name);
      CK(par_ckpt_read(c, name, v->ndim, v->shape, 0, (int64_t)v->numel, r->v + v->offset));
    }
  }
  int64_t st, pos, ost;
  CK(par_ckpt_get_i64(c, "step", &st, 1));
  CK(par_ckpt_get_i64(c, "data_position", &pos, 1));
  CK(par_ckpt_get_i64(c, "optim_step", &ost, 1));
  par_data_set_position(r->data, (uint64_t)pos);
  optim_set_step(r->opt, (long)ost);
  *step = (long)st;
done:
  if (rc != STRATA_OK) snprintf(err, errlen, "%s", par_ckpt_error(c));
  par_ckpt_close(c);
  return rc;
}

/* ------------------------------------------------------------ metrics */

/* Rank 0: a new metrics file, or on resume the old one cut back to the
 * rows of steps <= start (rows after the checkpoint are recomputed). */
static void open_metrics(lua_State *L, run_t *r, long start) {
  char err[600] = "";
  int rc;
  if (start > 0) {
    double *steps = NULL;
    size_t n = 0, keep = 0;
    if (par_metrics_read(r->metrics_path, "step", &steps, &n, NULL, 0) == STRATA_OK) {
      while (keep < n && steps[keep] <= (double)start) keep++;
      free(steps);
      rc = par_metrics_open(r->metrics_path, metric_names, NMETRICS, keep, &r->metrics, err,
                            sizeof err);
      if (rc == STRATA_OK) return;
    }
  }
  rc = par_metrics_create(r->metrics_path, metric_names, NMETRICS, &r->metrics, err, sizeof err);
  if (rc != STRATA_OK) run_fail(L, 0, "%s", err);
}

static void metrics_attrs(lua_State *L, run_t *r, int resumed) {
  char buf[64];
  par_metrics_set_attr(r->metrics, "name", r->name);
  par_metrics_set_attr(r->metrics, "recipe", recipe_text(L));
  par_metrics_set_attr(r->metrics, "model", r->model_desc);
  par_metrics_set_attr(r->metrics, "optim", r->optim_desc);
  par_metrics_set_attr(r->metrics, "layout", r->layout);
  snprintf(buf, sizeof buf, "%llu", (unsigned long long)r->seed);
  par_metrics_set_attr(r->metrics, "seed", buf);
  if (r->entropy > 0) {
    snprintf(buf, sizeof buf, "%.10g", r->entropy);
    par_metrics_set_attr(r->metrics, "entropy_rate", buf);
  }
  lstrata_info(L);
  par_metrics_set_attr(r->metrics, "versions", lua_tostring(L, -1));
  lua_pop(L, 1);
  if (resumed) par_metrics_set_attr(r->metrics, "resumed", "true");
}

/* Metrics rows are written at most about once a second (and before every
 * checkpoint, evaluation and the end): opening the HDF5 file for each row
 * would cost a fifth of a small model's step, and a reader still sees the
 * run at most a second late. */
#define ROWS_MAX 4096

static void flush_rows(lua_State *L, run_t *r, double t) {
  if (r->nrows > 0 && par_metrics_append(r->metrics, r->rows, r->nrows) != STRATA_OK)
    run_fail(L, 0, "%s", par_metrics_error(r->metrics));
  r->nrows = 0;
  r->last_flush = t;
}

/* ------------------------------------------------------------ steps */

static void check(lua_State *L, run_t *r, int rc, const char *what) {
  if (rc != STRATA_OK) run_fail(L, 0, "%s: %s", what, par_gpt_last_error(r->model));
}

/* Mean validation loss over eval_batches batches shared among the ranks. */
static double evaluate(lua_State *L, run_t *r) {
  uint64_t nval = par_data_samples(r->data, PAR_SPLIT_VAL);
  if (nval == 0) return NAN;
  double sum = 0;
  for (int k = r->rank; k < r->eval_batches; k += r->size) {
    if (par_data_fill(r->data, PAR_SPLIT_VAL, (uint64_t)k * (uint64_t)r->batch, r->batch, r->in,
                      r->tg) != STRATA_OK)
      run_fail(L, 0, "validation data: %s", par_data_error(r->data));
    float loss;
    check(L, r, par_gpt_forward(r->model, r->in, r->tg, r->batch, r->mc.seq, &loss), "validation");
    sum += loss;
  }
  if (r->size > 1 && comm_allreduce(r->comm, &sum, &sum, 1, COMM_F64, COMM_SUM) != STRATA_OK)
    run_fail(L, 0, "allreduce: %s", comm_last_error(r->comm));
  return sum / r->eval_batches;
}

/* One optimizer step; returns the mean training loss over all ranks. */
static double train_step(lua_State *L, run_t *r, double *gnorm) {
  float loss;
  if (par_data_next(r->data, r->rank, r->dp, r->batch, r->in, r->tg) != STRATA_OK)
    run_fail(L, 0, "data: %s", par_data_error(r->data));
  check(L, r, par_gpt_zero_grad(r->model), "zero_grad");
  check(L, r, par_gpt_forward(r->model, r->in, r->tg, r->batch, r->mc.seq, &loss), "forward");
  check(L, r, par_gpt_backward(r->model), "backward");
  size_t n = 0;
  float *grads = par_gpt_grads(r->model, &n);
  double l = loss;
  if (r->size > 1) {
    if (comm_allreduce(r->comm, grads, grads, n, COMM_F32, COMM_AVG) != STRATA_OK ||
        comm_allreduce(r->comm, &l, &l, 1, COMM_F64, COMM_AVG) != STRATA_OK)
      run_fail(L, 0, "allreduce: %s", comm_last_error(r->comm));
  }
  double total = 0;
  if (optim_grad_sumsq(r->opt, r->sq, r->tens, r->nt) != STRATA_OK)
    run_fail(L, 0, "gradient norm: %s", optim_last_error(r->opt));
  for (int i = 0; i < r->nt; i++) total += r->sq[i];
  float scale;
  optim_grad_scale(total, 1.0f, (float)r->clip, &scale, gnorm);
  if (!isfinite(*gnorm))
    run_fail(L, 1, "the gradients are not finite (norm %g) at loss %g: lower optim.lr", *gnorm, l);
  if (optim_step(r->opt, r->tens, r->nt, scale) != STRATA_OK)
    run_fail(L, 0, "optimizer: %s", optim_last_error(r->opt));
  return l;
}

/* strata.train(cfg, data) -> summary table {steps=, loss=, val_loss=, entropy_rate=, tokens_per_s=} */
static int l_train(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  par_data_t *data = lstrata_todata(L, 2);
  run_t *r = lua_newuserdatauv(L, sizeof *r, 1);
  memset(r, 0, sizeof *r);
  luaL_setmetatable(L, RUN_MT);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, -2, 1); /* keep the data alive as long as the run */
  int run_idx = lua_gettop(L);
  r->data = data;
  r->mc.layers = (int)cfg_int(L, "model", "layers");
  r->mc.hidden = (int)cfg_int(L, "model", "hidden");
  r->mc.heads = (int)cfg_int(L, "model", "heads");
  r->mc.seq = (int)cfg_int(L, "model", "seq");
  r->mc.vocab = (int)cfg_int(L, "model", "vocab");
  r->mc.recompute = cfg_bool(L, "model", "recompute");
  r->steps = (long)cfg_int(L, "train", "steps");
  r->batch = (int)cfg_int(L, "train", "batch");
  r->eval_every = (long)cfg_int(L, "train", "eval_every");
  r->eval_batches = (int)cfg_int(L, "train", "eval_batches");
  r->log_every = (long)cfg_int(L, "train", "log_every");
  r->seed = (uint64_t)cfg_int(L, "train", "seed");
  r->every_ckpt = (long)cfg_int(L, "checkpoint", "every");
  r->final_ckpt = cfg_bool(L, "checkpoint", "final");
  r->metrics_every = (long)cfg_int(L, "metrics", "every");
  r->clip = cfg_num(L, "optim", "clip");
  r->dp = (int)cfg_int(L, "parallel", "dp");
  cfg_str(L, NULL, "name", r->name, sizeof r->name);
  cfg_str(L, "optim", "name", r->optim_name, sizeof r->optim_name);
  cfg_str(L, "checkpoint", "path", r->ckpt, sizeof r->ckpt);
  cfg_str(L, "metrics", "path", r->metrics_path, sizeof r->metrics_path);
  cfg_str(L, "metrics", "plot", r->plot, sizeof r->plot);
  lua_getfield(L, 1, "train");
  lua_getfield(L, -1, "resume");
  if (lua_type(L, -1) == LUA_TSTRING) snprintf(r->resume, sizeof r->resume, "%s", lua_tostring(L, -1));
  else if (lua_toboolean(L, -1)) snprintf(r->resume, sizeof r->resume, "%s", r->ckpt);
  r->resume_given = r->resume[0] != 0;
  lua_pop(L, 2);
  r->entropy = par_data_entropy_rate(data);
  snprintf(r->model_desc, sizeof r->model_desc, "layers=%d hidden=%d heads=%d seq=%d vocab=%d",
           r->mc.layers, r->mc.hidden, r->mc.heads, r->mc.seq, r->mc.vocab);

  MPI_Comm world = lstrata_world(L);
  comm_config_t cc = COMM_CONFIG_DEFAULTS;
  if (comm_from_mpi(&r->comm, world, &cc) != STRATA_OK) run_fail(L, 0, "cannot attach libcomm to MPI");
  comm_set_name(r->comm, "dp");
  r->rank = comm_rank(r->comm), r->size = comm_size(r->comm);
  snprintf(r->layout, sizeof r->layout, "dp=%d tp=1 pp=1 sp=1 zero=0 ranks=%d threads=%d", r->dp,
           r->size, lstrata_threads(NULL, NULL));
  r->tty = r->rank == 0 && isatty(STDERR_FILENO);

  par_gpt_options_t go = PAR_GPT_OPTIONS_DEFAULTS;
  go.threads = lstrata_threads(NULL, NULL);
  if (par_gpt_create_ex(&r->model, &r->mc, &go, r->seed) != STRATA_OK)
    run_fail(L, 1, "model: %s", par_gpt_create_error());
  setup_optimizer(L, r);
  size_t bt = (size_t)r->batch * (size_t)r->mc.seq;
  if (!(r->in = malloc(bt * sizeof *r->in)) || !(r->tg = malloc(bt * sizeof *r->tg)) ||
      !(r->rows = malloc(ROWS_MAX * NMETRICS * sizeof *r->rows)))
    run_fail(L, 1, "out of memory for a batch of %zu tokens", bt);

  long start = 0;
  char err[1200] = "";
  if (r->resume_given) {
    if (access(r->resume, R_OK) != 0)
      run_fail(L, 1, "train.resume: no checkpoint at '%s' (%s)", r->resume, strerror(errno));
    if (load_checkpoint(r, r->resume, &start, err, sizeof err) != STRATA_OK)
      run_fail(L, 1, "cannot resume: %s", err);
    if (start > r->steps)
      run_fail(L, 1, "cannot resume: checkpoint '%s' is at step %ld, beyond train.steps = %ld",
               r->resume, start, r->steps);
  }
  if (r->rank == 0) {
    make_parent(r->metrics_path);
    make_parent(r->ckpt);
    if (r->plot[0]) make_parent(r->plot);
    open_metrics(L, r, start);
    metrics_attrs(L, r, start > 0);
    size_t np = par_gpt_param_count(&r->mc);
    printf("strata: %s: GPT %s (%.2fM parameters), %s, %d rank%s x %d thread%s%s\n", r->name,
           r->model_desc, (double)np / 1e6, r->optim_name, r->size, r->size > 1 ? "s" : "",
           lstrata_threads(NULL, NULL), lstrata_threads(NULL, NULL) > 1 ? "s" : "",
           start > 0 ? "" : "");
    if (start > 0) printf("strata: resumed from '%s' at step %ld\n", r->resume, start);
    fflush(stdout);
  }

  const char *kill_at = getenv("STRATA_FAULT_KILL_AT_STEP"); /* fault injection for tests */
  long kill_step = kill_at ? atol(kill_at) : -1;
  r->last_flush = now();
  double t0 = now(), loss = NAN, val = NAN, tps = 0;
  /* tokens/s counts training time only (data, forward, backward, allreduce,
   * update), not evaluation, checkpoints or metrics I/O: tt is its clock,
   * and rates are averaged since the last metrics row / log line. */
  double tt = 0, tt_row = 0, tt_log = 0;
  long done_since = 0, steps_row = 0, steps_log = 0;
  const double tokens_per_step = (double)r->dp * (double)r->batch * r->mc.seq;
  for (long step = start + 1; step <= r->steps; step++) {
    float lr = 0;
    optim_current_lr(r->opt, 0, &lr);
    double gnorm = 0, s0 = now();
    loss = train_step(L, r, &gnorm);
    double t = now();
    tt += t - s0;
    done_since++, steps_row++, steps_log++;
    int eval = (r->eval_every > 0 && step % r->eval_every == 0) || step == r->steps;
    double v = eval ? evaluate(L, r) : NAN;
    if (eval) val = v;
    if (r->rank == 0 && (step % r->metrics_every == 0 || eval || step == r->steps)) {
      size_t cur = 0, peak = 0;
      par_gpt_memory(r->model, &cur, &peak);
      comm_counter_t cnt = {0};
      comm_counters(r->comm, COMM_K_ALLREDUCE, &cnt);
      tps = tokens_per_step * (double)steps_row / (tt - tt_row);
      tt_row = tt, steps_row = 0;
      double row[NMETRICS] = {(double)step, loss, v, lr, gnorm, tps, (double)peak,
                              (double)cnt.bytes_sent};
      memcpy(r->rows + (size_t)r->nrows * NMETRICS, row, sizeof row);
      r->nrows++;
    }
    int ckpt = (r->every_ckpt > 0 && step % r->every_ckpt == 0) || (step == r->steps && r->final_ckpt);
    if (r->rank == 0 && (r->nrows == ROWS_MAX || t - r->last_flush >= 1.0 || eval || ckpt))
      flush_rows(L, r, t);
    int print = r->rank == 0 && (r->tty || step % r->log_every == 0 || eval || step == r->steps);
    if (print) {
      double eta = (t - t0) / (double)done_since * (double)(r->steps - step);
      size_t cur = 0, peak = 0;
      par_gpt_memory(r->model, &cur, &peak);
      char etas[32], vals[32] = "";
      fmt_duration(etas, sizeof etas, eta);
      if (!isnan(val)) snprintf(vals, sizeof vals, " | val %.4f", val);
      double shown = tokens_per_step * (double)steps_log / (tt - tt_log);
      tt_log = tt, steps_log = 0;
      if (r->tty)
        fprintf(stderr, "\rstep %ld/%ld | loss %.4f%s | %.1fk tok/s | mem %.1f MiB | ETA %s   ", step,
                r->steps, loss, vals, shown / 1e3, (double)peak / (1 << 20), etas);
      else
        printf("step %ld/%ld | loss %.4f%s | lr %.3g | %.1fk tok/s | mem %.1f MiB | ETA %s\n", step,
               r->steps, loss, vals, lr, shown / 1e3, (double)peak / (1 << 20), etas);
      fflush(stdout);
    }
    if (ckpt) {
      if (save_checkpoint(L, r, step, err, sizeof err) != STRATA_OK)
        run_fail(L, 1, "checkpoint: %s", err);
    }
    if (step == kill_step) raise(SIGKILL);
  }
  double elapsed = now() - t0;
  if (r->tty) fprintf(stderr, "\n");
  if (r->rank == 0) {
    flush_rows(L, r, now());
    char el[32];
    fmt_duration(el, sizeof el, elapsed);
    long ran = r->steps - start;
    double avg = ran > 0 && tt > 0 ? (double)ran * tokens_per_step / tt : 0;
    printf("strata: %s: %ld steps in %s (%.1fk tokens/s while training)\n", r->name, ran, el,
           avg / 1e3);
    tps = avg;
    if (!isnan(val)) {
      if (r->entropy > 0)
        printf("strata: validation loss %.4f nats/token; entropy rate of the source %.4f "
               "nats/token; gap %.4f\n",
               val, r->entropy, val - r->entropy);
      else printf("strata: validation loss %.4f nats/token\n", val);
    }
    par_metrics_destroy(r->metrics);
    r->metrics = NULL;
    if (r->plot[0]) {
      char perr[600];
      if (lstrata_plot(r->metrics_path, NULL, 0, r->plot, perr, sizeof perr) != STRATA_EXIT_OK)
        fprintf(stderr, "strata: plot: %s\n", perr);
      else printf("strata: metrics in %s, plot in %s\n", r->metrics_path, r->plot);
    } else {
      printf("strata: metrics in %s\n", r->metrics_path);
    }
    fflush(stdout);
  }
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, r->steps);
  lua_setfield(L, -2, "steps");
  lua_pushnumber(L, loss);
  lua_setfield(L, -2, "loss");
  lua_pushnumber(L, val);
  lua_setfield(L, -2, "val_loss");
  if (r->entropy > 0) {
    lua_pushnumber(L, r->entropy);
    lua_setfield(L, -2, "entropy_rate");
  }
  lua_pushnumber(L, tps);
  lua_setfield(L, -2, "tokens_per_s");
  lua_pushcfunction(L, run_free); /* free now, not at the next collection */
  lua_pushvalue(L, run_idx);
  lua_call(L, 1, 0);
  return 1;
}

int luaopen_strata_train(lua_State *L) {
  luaL_newmetatable(L, RUN_MT);
  lua_pushcfunction(L, run_free);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, run_free);
  lua_setfield(L, -2, "__close");
  lua_pop(L, 1);
  static const luaL_Reg f[] = {{"train", l_train}, {NULL, NULL}};
  luaL_newlib(L, f);
  return 1;
}
