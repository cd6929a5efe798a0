/* strata.train(cfg, data): binds libparallel's training engine
 * (strata/par_train.h) behind strata.experiment.
 *
 * The engine and its loop do the training (steps, gradient reduction,
 * evaluation, metrics, checkpoints); this file turns the validated recipe
 * table into the engine's configuration, shows progress on rank 0, and
 * prints the summary and the plot at the end. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/parallel.h>

#include "strata_lua.h"

par_data_t *lstrata_todata(lua_State *L, int idx);

#define RUN_MT "strata.run"

typedef struct {
  par_engine_t *e; /* freed by run_free, also on errors through __gc */
  long log_every, kill_step;
  int fp16; /* the progress line shows the loss scale */
  int offload;           /* ... and the bytes the optimizer offload moves between tiers */
  uint64_t off_moved[2]; /* as of the last line: down and up between the tiers off_tier, off_tier + 1 */
  int off_tier;          /* 0: the device and the host (chunks), 1: the host and NVMe */
  long off_step;
  int tty;
  double flops_per_token, peak; /* model FLOPs per token; the run's GEMM peak, all its ranks' (0: unknown):
                                   on the CPU each rank's sgemm peak, on GPUs each GPU's bf16 peak */
  const char *resume, *ckpt; /* held by the configuration table */
  const char *changes; /* on resume: the settings other than the checkpoint's ("": none; NULL: it records none) */
} run_t;

static int run_free(lua_State *L) {
  run_t *r = luaL_checkudata(L, 1, RUN_MT);
  par_engine_destroy(r->e);
  r->e = NULL;
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
/* The string stays valid while the configuration table holds it; "" when absent. */
static const char *cfg_str(lua_State *L, const char *sec, const char *key) {
  cfg_push(L, sec, key);
  const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
  lua_pop(L, 2);
  return v;
}

/* An elastic run (elastic.min_ranks under strata run -n): the planner's
 * bytes per rank for every rank count the launcher may choose after a
 * failure (min_ranks up to the ranks the run has, or grows to), and the
 * memory a rank has (offload.device_mb, else the node's shared by its
 * ranks), for the launcher to pick among the layouts that fit. */
static void plan_elastic_ranks(lua_State *L, par_engine_t *e, int size) {
  lua_getfield(L, 1, "elastic");
  lua_getfield(L, -1, "min_ranks");
  int elastic = lua_isinteger(L, -1), lo = (int)lua_tointeger(L, -1);
  lua_pop(L, 2);
  lua_getfield(L, 1, "_grow_ranks");
  int hi = lua_isinteger(L, -1) && lua_tointeger(L, -1) > size ? (int)lua_tointeger(L, -1) : size;
  lua_pop(L, 1);
  if (!elastic || !getenv("STRATA_ELASTIC_FILE")) return;
  char lines[8192];
  double need, node = 0;
  size_t k = (size_t)snprintf(lines, sizeof lines, "device_bytes=%.0f\n", cfg_num(L, "offload", "device_mb") * 1048576.0);
  for (int n = lo; n <= hi && k < sizeof lines - 64; n++)
    if (par_engine_plan_ranks(e, n, &need, &node) == STRATA_OK)
      k += (size_t)snprintf(lines + k, sizeof lines - k, "need_%d=%.0f\n", n, need);
  if (k < sizeof lines - 64) snprintf(lines + k, sizeof lines - k, "node_bytes=%.0f\n", node);
  lstrata_elastic_append(lines);
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

static void fmt_duration(char *buf, size_t len, double s) {
  if (!(s >= 0) || s > 1e7) snprintf(buf, len, "?");
  else if (s < 60) snprintf(buf, len, "%.0fs", s);
  else if (s < 3600) snprintf(buf, len, "%dm%02ds", (int)s / 60, (int)s % 60);
  else snprintf(buf, len, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
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

/* ------------------------------------------------------------ progress */

/* Rank 0 shows a line per log_every steps (every step, rewritten in place,
 * on a terminal) and at every evaluation. */
static void progress(void *ctx, const par_progress_t *p) {
  run_t *r = ctx;
  lstrata_status_t *st = lstrata_status(); /* for this rank's guard */
  st->step = p->step;
  st->steps = p->steps;
  if (p->last_ckpt_step >= 0 && p->last_ckpt_step != st->ckpt_step) {
    st->ckpt_step = p->last_ckpt_step;
    snprintf(st->ckpt_path, sizeof st->ckpt_path, "%s", p->last_ckpt_step == p->start && r->resume ? r->resume : r->ckpt);
  }
  if (p->begin) {
    if (p->rank == 0 && p->start > 0) {
      printf("strata: resumed from '%s' at step %ld (loaded in %.2f s)\n", r->resume, p->start, p->resume_s);
      fflush(stdout);
    }
    if (p->rank == 0 && r->resume && r->changes && r->changes[0]) { /* allowed, and said (once loaded) */
      fprintf(stderr, "strata: resuming with settings other than the checkpoint's: %s\n", r->changes);
      fflush(stderr);
    }
    return;
  }
  if (p->rank == 0 && (r->tty || p->step % r->log_every == 0 || p->evaluated || p->step == p->steps)) {
    char etas[32], els[32], vals[32] = "", mfu[32] = "", scale[160] = "";
    fmt_duration(etas, sizeof etas, p->eta_s);
    fmt_duration(els, sizeof els, p->elapsed_s);
    if (!isnan(p->last_val_loss)) snprintf(vals, sizeof vals, " | val %.4f", p->last_val_loss);
    /* model FLOPs (6N + 6LhT per token, recomputation not counted) against
     * the GEMM peak of the run: every rank's sgemm, or every GPU's bf16 */
    double flops = r->flops_per_token * p->tokens_per_s;
    if (r->peak > 0) snprintf(mfu, sizeof mfu, " (MFU %.0f%%)", 100 * flops / r->peak);
    if (r->fp16) snprintf(scale, sizeof scale, " | scale %g (%ld skipped)", p->loss_scale, p->overflows);
    par_engine_info_t in;
    if (r->offload && p->step > r->off_step && par_engine_info(r->e, &in) == STRATA_OK) {
      /* bytes moved per step between the tiers that exchange them: the chunks' device and host,
       * ZeRO-Infinity's host and NVMe */
      int a = r->off_tier, b = a + 1;
      const char *names[] = {"dev", "host", "nvme"};
      double s = 1e6 * (double)(p->step - r->off_step);
      size_t k = strlen(scale);
      snprintf(scale + k, sizeof scale - k, " | offload %s>%s %.1f %s>%s %.1f MB/step", names[a], names[b],
               (double)(in.offload_moved_tier[a][b] - r->off_moved[0]) / s, names[b], names[a],
               (double)(in.offload_moved_tier[b][a] - r->off_moved[1]) / s);
      r->off_moved[0] = in.offload_moved_tier[a][b], r->off_moved[1] = in.offload_moved_tier[b][a];
      r->off_step = p->step;
    }
    if (r->tty)
      fprintf(stderr, "\rstep %ld/%ld | loss %.4f%s | %.1fk tok/s | %.1f GFLOP/s%s | mem %.1f MiB/rank%s | %s, ETA %s   ",
              p->step, p->steps, p->loss, vals, p->tokens_per_s / 1e3, flops / 1e9, mfu,
              (double)p->mem_peak / (1 << 20), scale, els, etas);
    else
      printf("step %ld/%ld | loss %.4f%s | lr %.3g | %.1fk tok/s | %.1f GFLOP/s%s | mem %.1f MiB/rank%s | %s, ETA %s\n",
             p->step, p->steps, p->loss, vals, p->lr, p->tokens_per_s / 1e3, flops / 1e9, mfu,
             (double)p->mem_peak / (1 << 20), scale, els, etas);
    fflush(stdout);
  }
  if (p->step == r->kill_step) raise(SIGKILL); /* fault injection for tests */
}

static void notice(void *ctx, const char *msg) {
  const run_t *r = ctx;
  /* The engine compares the optimizer's and the data's descriptions on
   * resume; the runner's note covers them when the checkpoint records its
   * settings. */
  if (r->changes && !strncmp(msg, "resuming with ", 14)) return;
  fprintf(stderr, "strata: %s\n", msg);
  fflush(stderr);
}

/* Raises the run's end for a stop request: one line, exit status 3. */
static int run_stopped(lua_State *L, const par_train_result_t *res) {
  char hint[2400], msg[2600];
  lstrata_checkpoint_hint(hint, sizeof hint);
  snprintf(msg, sizeof msg, "stopped on request after step %ld of %ld; %s", res->step,
           lstrata_status()->steps, hint);
  lua_createtable(L, 0, 3);
  lua_pushstring(L, msg);
  lua_setfield(L, -2, "message");
  lua_pushinteger(L, STRATA_EXIT_STOPPED);
  lua_setfield(L, -2, "status");
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "same_on_all_ranks");
  return lua_error(L);
}

/* ------------------------------------------------------------ train */

/* strata.train(cfg, data) -> summary table {steps=, loss=, val_loss=, entropy_rate=, tokens_per_s=, mem_peak=,
 * device_peak=, params=} */
static int l_train(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  par_data_t *data = lstrata_todata(L, 2);
  run_t *r = lua_newuserdatauv(L, sizeof *r, 1);
  memset(r, 0, sizeof *r);
  luaL_setmetatable(L, RUN_MT);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, -2, 1); /* keep the data alive as long as the run */
  int run_idx = lua_gettop(L);
  int threads = lstrata_threads(NULL, NULL);

  par_gpt_config_t mc = {
      .layers = (int)cfg_int(L, "model", "layers"), .hidden = (int)cfg_int(L, "model", "hidden"),
      .heads = (int)cfg_int(L, "model", "heads"), .seq = (int)cfg_int(L, "model", "seq"),
      .vocab = (int)cfg_int(L, "model", "vocab"), .recompute = cfg_bool(L, "model", "recompute")};
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = (int)cfg_int(L, "parallel", "dp");
  lay.tp = (int)cfg_int(L, "parallel", "tp");
  const char *tpm = cfg_str(L, "parallel", "tp_mode");
  lay.tp_mode = !strcmp(tpm, "2d") ? PAR_TP_2D : !strcmp(tpm, "2.5d") ? PAR_TP_2P5D : !strcmp(tpm, "3d") ? PAR_TP_3D
                                                                                                       : PAR_TP_1D;
  lay.tp_depth = (int)cfg_int(L, "parallel", "tp_depth");
  lay.sp = (int)cfg_int(L, "parallel", "sp");
  lay.seq_parallel = cfg_bool(L, "parallel", "seq_parallel");
  lay.pp = (int)cfg_int(L, "parallel", "pp");
  const char *sched = cfg_str(L, "parallel", "schedule");
  lay.schedule = !strcmp(sched, "gpipe") ? PAR_SCHED_GPIPE : !strcmp(sched, "interleaved") ? PAR_SCHED_INTERLEAVED
                                                                                            : PAR_SCHED_1F1B;
  lay.interleave = (int)cfg_int(L, "parallel", "interleave");
  lay.partition_activations = cfg_bool(L, "parallel", "partition_activations");
  const char *policy = cfg_str(L, "offload", "policy");
  lay.offload_optimizer = !strcmp(policy, "static") ? PAR_TIER_CPU : !strcmp(policy, "nvme") ? PAR_TIER_NVME
                                                                                              : PAR_TIER_DEVICE;
  lay.microbatch = (int)cfg_int(L, "train", "batch");
  lay.global_batch = (int)cfg_int(L, "train", "global_batch"); /* dp x batch x accum */
  lay.zero_stage = (int)cfg_int(L, "parallel", "zero");
  const char *prec = cfg_str(L, "parallel", "precision");
  lay.precision = !strcmp(prec, "bf16") ? PAR_PREC_BF16 : !strcmp(prec, "fp16") ? PAR_PREC_FP16 : PAR_PREC_FP32;
  r->fp16 = lay.precision == PAR_PREC_FP16;
  r->offload = lay.offload_optimizer == PAR_TIER_NVME || !strcmp(policy, "chunks"); /* (static moves nothing) */
  r->off_tier = lay.offload_optimizer == PAR_TIER_NVME ? 1 : 0;
  par_optim_config_t oc = {
      .name = cfg_str(L, "optim", "name"), .lr = cfg_num(L, "optim", "lr"),
      .min_lr = cfg_num(L, "optim", "min_lr"), .schedule = cfg_str(L, "optim", "schedule"),
      .warmup = (long)cfg_int(L, "optim", "warmup"),
      .weight_decay = cfg_num(L, "optim", "weight_decay"), .beta1 = cfg_num(L, "optim", "beta1"),
      .beta2 = cfg_num(L, "optim", "beta2"), .eps = cfg_num(L, "optim", "eps"),
      .momentum = cfg_num(L, "optim", "momentum"), .clip = cfg_num(L, "optim", "clip")};
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.seed = (uint64_t)cfg_int(L, "train", "seed");
  eo.offload_dir = cfg_str(L, "offload", "nvme_dir")[0] ? cfg_str(L, "offload", "nvme_dir") : NULL;
  eo.offload_chunks = !strcmp(policy, "chunks");
  eo.device_bytes = cfg_num(L, "offload", "device_mb") * 1048576.0;
  eo.host_bytes = cfg_num(L, "offload", "host_mb") * 1048576.0;
  eo.chunk_bytes = cfg_num(L, "offload", "chunk_mb") * 1048576.0;
  eo.threads = threads;
  /* STRATA_DEVICE=cpu keeps every rank on the CPU whatever the recipe says
   * (DESIGN: the one place environment variables are read is the runner). */
  const char *dev = cfg_str(L, "parallel", "device"), *force = getenv("STRATA_DEVICE");
  if (force && !strcmp(force, "cpu")) dev = "cpu";
  eo.device = !strcmp(dev, "cuda") ? PAR_DEVICE_CUDA : !strcmp(dev, "auto") ? PAR_DEVICE_AUTO : PAR_DEVICE_CPU;
  eo.bf16_matmul = cfg_bool(L, "parallel", "bf16_matmul");
  const char *acts = cfg_str(L, "parallel", "activations");
  eo.activations = !strcmp(acts, "bf16") ? TENSOR_BF16 : !strcmp(acts, "f16") ? TENSOR_F16 : TENSOR_F32;
  eo.steps = (long)cfg_int(L, "train", "steps");
  eo.comm = lstrata_world(L);
  const char *init = cfg_str(L, "model", "init");
  eo.init = init[0] ? init : NULL;
  cfg_push(L, "train", "seq");
  eo.seq = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
  lua_pop(L, 2);

  par_train_options_t to = PAR_TRAIN_OPTIONS_DEFAULTS;
  to.steps = eo.steps;
  to.eval_every = (int)cfg_int(L, "train", "eval_every");
  to.eval_batches = (int)cfg_int(L, "train", "eval_batches");
  to.ckpt_path = cfg_str(L, "checkpoint", "path");
  to.ckpt_every = (long)cfg_int(L, "checkpoint", "every");
  to.ckpt_final = cfg_bool(L, "checkpoint", "final");
  to.metrics_path = cfg_str(L, "metrics", "path");
  to.metrics_every = (long)cfg_int(L, "metrics", "every");
  const char *name = cfg_str(L, NULL, "name"), *plot = cfg_str(L, "metrics", "plot");
  lua_getfield(L, 1, "train");
  lua_getfield(L, -1, "resume");
  if (lua_type(L, -1) == LUA_TSTRING) to.resume = lua_tostring(L, -1);
  else if (lua_toboolean(L, -1)) to.resume = to.ckpt_path;
  lua_pop(L, 2); /* the strings stay referenced by the configuration table */
  /* batch warm-up and the learning-rate rule (par_train_run fills in the
   * end, the quantum and the tokens per sample from the layout) */
  cfg_push(L, "train", "batch_start");
  to.batch.start = lua_isinteger(L, -1) ? (long)lua_tointeger(L, -1) : 0;
  lua_pop(L, 2);
  cfg_push(L, "train", "batch_increment");
  to.batch.quantum = lua_isinteger(L, -1) ? (long)lua_tointeger(L, -1) : 0;
  lua_pop(L, 2);
  to.batch.warmup = (long)cfg_int(L, "train", "batch_warmup");
  lua_getfield(L, 1, "_grow_batch"); /* an elastic run that grows with its batch (experiment.lua) */
  to.stop_before_batch = lua_isinteger(L, -1) ? (long)lua_tointeger(L, -1) : 0;
  lua_pop(L, 1);
  to.batch.warmup_tokens = (double)cfg_int(L, "train", "batch_warmup_tokens");
  const char *rule = cfg_str(L, "optim", "lr_scaling");
  to.lr_rule = !strcmp(rule, "linear") ? OPTIM_LR_RULE_LINEAR : !strcmp(rule, "sqrt") ? OPTIM_LR_RULE_SQRT
                                                                                    : OPTIM_LR_RULE_NONE;
  cfg_push(L, "optim", "lr_batch");
  to.lr_batch = lua_isinteger(L, -1) ? (double)lua_tointeger(L, -1) : 0;
  lua_pop(L, 2);
  r->log_every = (long)cfg_int(L, "train", "log_every");
  const char *kill_at = getenv("STRATA_FAULT_KILL_AT_STEP"); /* fault injection for tests */
  r->kill_step = kill_at ? atol(kill_at) : -1;

  lstrata_info(L); /* versions, kept on the stack while the run lasts */
  const char *settings = cfg_str(L, NULL, "_settings"); /* what a resume compares (strata.experiment's) */
  par_attr_t attrs[] = {{"name", name},
                        {"recipe", recipe_text(L)},
                        {"strata_version", STRATA_VERSION},
                        {"versions", lua_tostring(L, -1)},
                        {"settings", settings}};
  to.attrs = attrs;
  to.nattrs = (int)(sizeof attrs / sizeof *attrs) - (settings[0] ? 0 : 1);
  to.progress = progress;
  to.notice = notice;
  to.ctx = r;
  to.stop = lstrata_stop_flag();
  to.diverge_factor = cfg_num(L, "train", "diverge_factor");
  to.ckpt_on_error = !strcmp(cfg_str(L, "checkpoint", "on_error"), "continue") ? PAR_ON_ERROR_CONTINUE
                                                                               : PAR_ON_ERROR_STOP;
  eo.collective_timeout_s = 60 * cfg_num(L, "train", "collective_timeout");
  eo.bucket_mb = cfg_num(L, "parallel", "bucket_mb");
  eo.loss_scale = cfg_num(L, "train", "loss_scale");
  eo.loss_scale_window = (int)cfg_int(L, "train", "loss_scale_window");
  r->resume = to.resume;
  eo.no_init = to.resume != NULL; /* the checkpoint gives every parameter */
  r->ckpt = to.ckpt_path;
  lua_getfield(L, 1, "_resume_changes"); /* nil: the checkpoint records no settings */
  r->changes = lua_tostring(L, -1);
  lua_pop(L, 1); /* the string stays referenced by the configuration table */
  int overwrite = cfg_bool(L, NULL, "overwrite") && !to.resume;

  char err[1600] = "";
  if (par_engine_create(&r->e, &mc, &lay, &oc, &eo, err, sizeof err) != STRATA_OK)
    run_fail(L, 1, "%s", err);
  int rank, size; /* of the run (the data-parallel group is smaller under tensor parallelism) */
  MPI_Comm_rank(eo.comm, &rank), MPI_Comm_size(eo.comm, &size);
  r->tty = rank == 0 && isatty(STDERR_FILENO);
  r->flops_per_token = par_gpt_flops_per_token(&mc, eo.seq ? eo.seq : mc.seq);
  /* The peak is measured once per machine, by rank 0 alone (the others
   * wait; with cores / ranks threads each, they take no core from it). On
   * GPUs: rank 0's device's bf16 peak (its spec sheet, else measured),
   * times the GPUs the run uses (ranks sharing one count it once). */
  int measured = 0, gpus = 0;
  char peak_desc[400] = "";
  par_engine_info_t ein;
  par_engine_info(r->e, &ein);
  if (ein.device >= 0) {
    int dev = -1, local = 0, ndev = comm_cuda_device_count();
    comm_local_device(eo.comm, &dev, &local);
    gpus = local < ndev; /* the first rank on each of its node's GPUs */
    if (size > 1) MPI_Allreduce(MPI_IN_PLACE, &gpus, 1, MPI_INT, MPI_SUM, eo.comm);
    if (rank == 0) r->peak = lstrata_device_peak(ein.device, 1, peak_desc, sizeof peak_desc) * gpus;
  } else if (rank == 0) {
    r->peak = lstrata_gemm_peak(threads, 1, &measured) * size;
  }
  if (size > 1) MPI_Barrier(eo.comm);
  if (to.resume && access(to.resume, R_OK) != 0)
    run_fail(L, 1, "train.resume: no checkpoint at '%s' (%s)", to.resume, strerror(errno));
  if (rank == 0) plan_elastic_ranks(L, r->e, size);
  if (rank == 0) {
    if (overwrite) { /* overwrite = true: the earlier run's outputs go now, not a stale checkpoint left behind */
      unlink(to.ckpt_path);
      unlink(to.metrics_path);
      if (plot[0]) unlink(plot);
    }
    make_parent(to.metrics_path);
    make_parent(to.ckpt_path);
    if (plot[0]) make_parent(plot);
    size_t np = par_gpt_param_count(&mc);
    char zero[96] = "";
    if (lay.zero_stage > 0) snprintf(zero, sizeof zero, ", ZeRO-%d", lay.zero_stage);
    if (lay.tp > 1 || lay.pp > 1)
      snprintf(zero + strlen(zero), sizeof zero - strlen(zero), ", tp %d%s%s%s x pp %d x dp %d", lay.tp,
               lay.tp_mode != PAR_TP_1D ? " (" : "", lay.tp_mode != PAR_TP_1D ? tpm : "",
               lay.tp_mode != PAR_TP_1D ? ")" : "", lay.pp, lay.dp);
    if (lay.pp > 1)
      snprintf(zero + strlen(zero), sizeof zero - strlen(zero), " (%s, %d microbatches%s)", sched,
               lay.global_batch / (lay.dp * lay.microbatch), lay.interleave > 1 ? ", interleaved" : "");
    if (lay.precision != PAR_PREC_FP32)
      snprintf(zero + strlen(zero), sizeof zero - strlen(zero), ", %s", prec);
    if (lay.offload_optimizer != PAR_TIER_DEVICE)
      snprintf(zero + strlen(zero), sizeof zero - strlen(zero), ", optimizer state offloaded to %s",
               lay.offload_optimizer == PAR_TIER_NVME ? "NVMe" : "the host");
    char peaks[512];
    if (ein.device >= 0)
      snprintf(peaks, sizeof peaks, "bf16 peak %.0f TFLOP/s per GPU x %d (%s)", r->peak / gpus / 1e12, gpus,
               peak_desc);
    else
      snprintf(peaks, sizeof peaks, "sgemm peak %.0f GFLOP/s per rank (%s)", r->peak / size / 1e9,
               measured ? "measured now, cached" : "cached");
    printf("strata: %s: GPT %s (%.2fM parameters), %s%s, %d rank%s x %d thread%s; %s\n", name,
           par_engine_describe(r->e, "model"), (double)np / 1e6, oc.name, zero, size, size > 1 ? "s" : "", threads,
           threads > 1 ? "s" : "", peaks);
    if (to.batch.start > 0 || to.lr_rule != OPTIM_LR_RULE_NONE) {
      char warm[128] = "", lrs[160] = "";
      if (to.batch.start > 0 && to.batch.warmup > 0)
        snprintf(warm, sizeof warm, "from %ld over %ld steps, ", to.batch.start, to.batch.warmup);
      else if (to.batch.start > 0)
        snprintf(warm, sizeof warm, "from %ld over %.0f tokens, ", to.batch.start, to.batch.warmup_tokens);
      if (to.lr_rule != OPTIM_LR_RULE_NONE)
        snprintf(lrs, sizeof lrs, "; peak learning rate %g x %s(B / %.0f)", oc.lr,
                 to.lr_rule == OPTIM_LR_RULE_SQRT ? "sqrt" : "", to.lr_batch > 0 ? to.lr_batch : (double)lay.global_batch);
      printf("strata: global batch B %sup to %d sequences of %d tokens%s\n", warm, lay.global_batch,
             eo.seq ? eo.seq : mc.seq, lrs);
    }
    fflush(stdout);
  }
  par_train_result_t res;
  int rc = par_train_run(r->e, data, &to, &res);
  if (r->tty) fprintf(stderr, "\n");
  if (rc != STRATA_OK) {
    const char *msg = par_engine_error(r->e);
    int same = par_engine_error_all_ranks(r->e);
    if (res.diverged)
      run_fail(L, same,
               "%s: lower optim.lr (%g) or lengthen optim.warmup (%ld); the limit is "
               "train.diverge_factor = %g (0: only a loss that is not finite)",
               msg, oc.lr, oc.warmup, to.diverge_factor);
    if (res.step > res.start || rc == STRATA_ETIMEOUT) { /* training had begun: say how to go on */
      char hint[2400];
      lstrata_checkpoint_hint(hint, sizeof hint);
      int n = (int)strlen(msg);
      if (n > 0 && msg[n - 1] == '.') n--;
      const char *ph = res.fail_phase ? res.fail_phase : "step";
      const char *in = !strcmp(ph, "step") ? "during" : !strcmp(ph, "evaluation") ? "in the evaluation after"
                       : !strcmp(ph, "checkpoint") ? "in the checkpoint after" : "in the last metrics rows after";
      run_fail(L, same, "%.*s; %s step %ld; %s", n, msg, in, res.fail_step, hint);
    }
    run_fail(L, same, "%s", msg);
  }
  if (res.grown) { /* an elastic run's batch has grown past what its ranks take: the launcher relaunches */
    lua_getfield(L, 1, "_grow_ranks");
    int ranks = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    lstrata_elastic_grow(ranks);
    char msg[256];
    snprintf(msg, sizeof msg, "elastic: the global batch reaches %ld after step %ld: stopping to grow to %d ranks",
             to.stop_before_batch, res.step, ranks);
    lua_createtable(L, 0, 3);
    lua_pushstring(L, msg), lua_setfield(L, -2, "message");
    lua_pushinteger(L, STRATA_EXIT_STOPPED), lua_setfield(L, -2, "status");
    lua_pushboolean(L, 1), lua_setfield(L, -2, "same_on_all_ranks");
    return lua_error(L);
  }
  if (res.stopped) run_stopped(L, &res);
  double entropy = par_data_entropy_rate(data);
  if (rank == 0) {
    char el[32];
    fmt_duration(el, sizeof el, res.elapsed_seconds);
    if (res.step == res.start) /* resumed at its last step: nothing was left to train */
      printf("strata: %s: already at step %ld of %ld: nothing to train (raise train.steps to go on)\n", name,
             res.step, (long)to.steps);
    else
      printf("strata: %s: %ld steps in %s (%.1fk tokens/s while training)\n", name, res.step - res.start, el,
             res.tokens_per_s / 1e3);
    if (!isnan(res.val_loss)) {
      if (entropy > 0)
        printf("strata: validation loss %.4f nats/token; entropy rate of the source %.4f "
               "nats/token; gap %.4f\n",
               res.val_loss, entropy, res.val_loss - entropy);
      else printf("strata: validation loss %.4f nats/token\n", res.val_loss);
    }
    if (plot[0]) {
      char perr[600];
      if (lstrata_plot(to.metrics_path, NULL, 0, plot, perr, sizeof perr) != STRATA_EXIT_OK)
        fprintf(stderr, "strata: plot: %s\n", perr);
      else printf("strata: metrics in %s, plot in %s\n", to.metrics_path, plot);
    } else {
      printf("strata: metrics in %s\n", to.metrics_path);
    }
    fflush(stdout);
  }
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, to.steps);
  lua_setfield(L, -2, "steps");
  lua_pushnumber(L, res.loss);
  lua_setfield(L, -2, "loss");
  lua_pushnumber(L, res.val_loss);
  lua_setfield(L, -2, "val_loss");
  if (entropy > 0) {
    lua_pushnumber(L, entropy);
    lua_setfield(L, -2, "entropy_rate");
  }
  lua_pushnumber(L, res.tokens_per_s);
  lua_setfield(L, -2, "tokens_per_s");
  size_t mem_cur = 0, mem_peak = 0;
  par_engine_memory(r->e, &mem_cur, &mem_peak);
  lua_pushinteger(L, (lua_Integer)mem_peak);
  lua_setfield(L, -2, "mem_peak"); /* bytes of this rank */
  par_engine_info_t in;
  par_engine_info(r->e, &in);
  lua_pushinteger(L, (lua_Integer)in.device_peak);
  lua_setfield(L, -2, "device_peak"); /* the device's bytes at most, the chunk policy's chunks there counted */
  lua_pushinteger(L, (lua_Integer)par_gpt_param_count(&mc));
  lua_setfield(L, -2, "params");
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
