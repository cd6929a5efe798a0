/* The planner in Lua: strata.plan, strata.plan_search, strata.reproduce,
 * strata.reproductions, strata.cluster, strata.plan_calibrate (a cluster
 * whose gemm_efficiency comes from a measured GEMM rate) and
 * strata.plan_largest (the largest model of a family that fits).
 *
 * Model and layout tables use the same keys as strata.experiment's model and
 * parallel sections (layers, hidden, heads, seq, vocab, recompute; dp, tp,
 * pp, sp, zero) plus the planning-only ones (tp_mode, tp_depth, microbatch,
 * global_batch, schedule, interleave, precision, offload_*). A cluster is a
 * preset name ("dgx-a100-80gb", see recipes/clusters/) or a table of
 * par_cluster_t fields, optionally starting from `base = "<preset>"`.
 * Unknown keys raise an error naming the key. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <strata/parallel.h>
#include <strata/tensor.h>

#include "strata_lua.h"

/* A planner input error: the recipe's file:line and the message, exit
 * status 2 (the recipe is wrong), as the recipe schema's errors. */
static int plan_error(lua_State *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int plan_error(lua_State *L, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  luaL_where(L, 1);
  lua_createtable(L, 0, 3);
  lua_pushfstring(L, "%s%s", lua_tostring(L, -2), msg);
  lua_setfield(L, -2, "message");
  lua_pushinteger(L, STRATA_EXIT_USAGE);
  lua_setfield(L, -2, "status");
  lua_pushboolean(L, 1); /* every rank plans alike */
  lua_setfield(L, -2, "same_on_all_ranks");
  return lua_error(L);
}

static int opt_int(lua_State *L, int t, const char *key, int *dst) {
  int present = lua_getfield(L, t, key) != LUA_TNIL;
  if (present) {
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok) return plan_error(L, "plan: %s must be an integer, got %s", key, luaL_tolstring(L, -1, NULL));
    *dst = (int)v;
  }
  lua_pop(L, 1);
  return present;
}

/* A string field mapped onto an enum by a NULL-terminated list of names. */
static void opt_enum(lua_State *L, int t, const char *key, const char *const *names, int *dst) {
  if (lua_getfield(L, t, key) != LUA_TNIL) {
    const char *s = lua_tostring(L, -1);
    int i = 0;
    for (; s && names[i]; i++)
      if (!strcmp(s, names[i])) break;
    if (!s || !names[i]) {
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (int j = 0; names[j]; j++) {
        luaL_addstring(&b, j ? ", " : "");
        luaL_addstring(&b, names[j]);
      }
      luaL_pushresult(&b); /* the field stays below it, at -2 */
      plan_error(L, "plan: %s = %s: expected one of %s", key, s ? s : luaL_typename(L, -2),
                 lua_tostring(L, -1));
    }
    *dst = i;
  }
  lua_pop(L, 1);
}

static const char *const model_keys[] = {"layers", "hidden", "heads", "seq", "vocab", "recompute",
                                         NULL};
static const char *const layout_keys[] = {
    "dp", "tp", "pp", "sp", "zero", "tp_mode", "tp_depth", "microbatch", "global_batch", "schedule",
    "interleave", "precision", "offload_optimizer", "offload_gradients", "offload_params", "seq_parallel",
    "partition_activations", "checkpoint_cpu", NULL};


static void reject_unknown(lua_State *L, int t, const char *section, const char *const *keys) {
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    int i = 0;
    for (; k && keys[i]; i++)
      if (!strcmp(k, keys[i])) break;
    if ((!k || !keys[i]) && !section)
      plan_error(L, "plan: unknown key '%s' (keys: model, parallel, cluster, params, print)",
                 k ? k : luaL_tolstring(L, -1, NULL));
    if (!k || !keys[i])
      plan_error(L, "plan: unknown key %s.%s", section, k ? k : luaL_tolstring(L, -1, NULL));
  }
}

static void parse_model(lua_State *L, int t, par_gpt_config_t *m) {
  *m = (par_gpt_config_t)PAR_GPT_CONFIG_DEFAULTS;
  if (lua_type(L, t) != LUA_TTABLE) plan_error(L, "plan: model must be a table");
  reject_unknown(L, t, "model", model_keys);
  opt_int(L, t, "layers", &m->layers);
  opt_int(L, t, "hidden", &m->hidden);
  opt_int(L, t, "heads", &m->heads);
  opt_int(L, t, "seq", &m->seq);
  opt_int(L, t, "vocab", &m->vocab);
  lua_getfield(L, t, "recompute");
  m->recompute = lua_toboolean(L, -1);
  lua_pop(L, 1);
}

static void parse_layout(lua_State *L, int t, par_layout_t *l) {
  static const char *const modes[] = {"1d", "2d", "2.5d", "3d", NULL};
  static const char *const scheds[] = {"gpipe", "1f1b", "interleaved", NULL};
  static const char *const precs[] = {"fp32", "bf16", "fp16", NULL};
  static const char *const tiers[] = {"device", "cpu", "nvme", NULL};
  int v;
  *l = (par_layout_t)PAR_LAYOUT_DEFAULTS;
  if (lua_isnoneornil(L, t)) return;
  if (lua_type(L, t) != LUA_TTABLE) plan_error(L, "plan: parallel must be a table");
  reject_unknown(L, t, "parallel", layout_keys);
  opt_int(L, t, "dp", &l->dp);
  opt_int(L, t, "tp", &l->tp);
  opt_int(L, t, "pp", &l->pp);
  opt_int(L, t, "sp", &l->sp);
  opt_int(L, t, "zero", &l->zero_stage);
  opt_int(L, t, "tp_depth", &l->tp_depth);
  opt_int(L, t, "microbatch", &l->microbatch);
  opt_int(L, t, "global_batch", &l->global_batch);
  opt_int(L, t, "interleave", &l->interleave);
  if (lua_getfield(L, t, "seq_parallel") != LUA_TNIL) l->seq_parallel = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (lua_getfield(L, t, "partition_activations") != LUA_TNIL) l->partition_activations = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (lua_getfield(L, t, "checkpoint_cpu") != LUA_TNIL) l->checkpoint_cpu = lua_toboolean(L, -1);
  lua_pop(L, 1);
  v = l->tp_mode, opt_enum(L, t, "tp_mode", modes, &v), l->tp_mode = (par_tp_mode_t)v;
  v = l->schedule, opt_enum(L, t, "schedule", scheds, &v), l->schedule = (par_schedule_t)v;
  v = l->precision, opt_enum(L, t, "precision", precs, &v), l->precision = (par_precision_t)v;
  v = l->offload_optimizer, opt_enum(L, t, "offload_optimizer", tiers, &v);
  l->offload_optimizer = (par_tier_t)v;
  v = l->offload_gradients, opt_enum(L, t, "offload_gradients", tiers, &v);
  l->offload_gradients = (par_tier_t)v;
  v = l->offload_params, opt_enum(L, t, "offload_params", tiers, &v);
  l->offload_params = (par_tier_t)v;
}

static void parse_cluster(lua_State *L, int t, par_cluster_t *c) {
  char why[256] = "";
  *c = (par_cluster_t)PAR_CLUSTER_DEFAULTS;
  if (lua_type(L, t) == LUA_TSTRING) {
    if (par_cluster_preset(lua_tostring(L, t), c, why, sizeof why) != STRATA_OK)
      plan_error(L, "plan: cluster '%s': %s", lua_tostring(L, t), why);
    return;
  }
  if (lua_type(L, t) != LUA_TTABLE) plan_error(L, "plan: cluster must be a preset name or a table");
  if (lua_getfield(L, t, "base") == LUA_TSTRING &&
      par_cluster_preset(lua_tostring(L, -1), c, why, sizeof why) != STRATA_OK)
    plan_error(L, "plan: cluster base '%s': %s", lua_tostring(L, -1), why);
  lua_pop(L, 1);
  lua_pushnil(L);
  while (lua_next(L, t)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
    if (!strcmp(k, "base") || !strcmp(k, "name")) {
      if (!strcmp(k, "name") && lua_type(L, -1) == LUA_TSTRING)
        snprintf(c->name, sizeof c->name, "%s", lua_tostring(L, -1));
    } else if (lua_type(L, -1) == LUA_TTABLE) { /* peak_flops = {fp32 = ...}, as in recipes/clusters */
      lua_pushnil(L);
      while (lua_next(L, -2)) {
        char full[128];
        snprintf(full, sizeof full, "%s.%s", k, lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?");
        if (!lua_isnumber(L, -1) || par_cluster_set(c, full, lua_tonumber(L, -1)) != STRATA_OK)
          plan_error(L, "plan: unknown or non-numeric cluster key '%s'", full);
        lua_pop(L, 1);
      }
    } else if (!lua_isnumber(L, -1)) {
      plan_error(L, "plan: cluster.%s must be a number", k);
    } else if (par_cluster_set(c, k, lua_tonumber(L, -1)) != STRATA_OK) {
      plan_error(L, "plan: unknown cluster key '%s'", k);
    }
    lua_pop(L, 1);
  }
  if (par_cluster_validate(c, why, sizeof why) != STRATA_OK) plan_error(L, "plan: cluster: %s", why);
}

static void parse_params(lua_State *L, int t, par_plan_params_t *p) {
  *p = (par_plan_params_t)PAR_PLAN_PARAMS_DEFAULTS;
  if (lua_isnoneornil(L, t)) return;
  if (lua_type(L, t) == LUA_TSTRING) { /* "engine": strata's own GPT and engine */
    if (strcmp(lua_tostring(L, t), "engine") != 0)
      plan_error(L, "plan: params = '%s': a table of planner parameters, or \"engine\"", lua_tostring(L, t));
    par_plan_params_engine(p);
    return;
  }
  luaL_checktype(L, t, LUA_TTABLE);
  if (lua_getfield(L, t, "base") == LUA_TSTRING) { /* {base = "engine", gemm_efficiency = ...} */
    if (strcmp(lua_tostring(L, -1), "engine") != 0)
      plan_error(L, "plan: params.base = '%s': only \"engine\" is a base", lua_tostring(L, -1));
    par_plan_params_engine(p);
  }
  lua_pop(L, 1);
  lua_pushnil(L);
  while (lua_next(L, t)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
    if (!strcmp(k, "base")) {
      lua_pop(L, 1);
      continue;
    }
    if (!lua_isnumber(L, -1) || par_plan_params_set(p, k, lua_tonumber(L, -1)) != STRATA_OK)
      plan_error(L, "plan: params.%s is not a planner parameter or not a number", k);
    lua_pop(L, 1);
  }
}

static void push_plan(lua_State *L, const par_plan_t *r) {
  static const char *const mem_names[PAR_MEM_COUNT] = {"params", "grads",   "optim",
                                                       "activ",  "buffers", "reserved"};
  static const char *const time_names[PAR_T_COUNT] = {"compute", "membound", "bubble", "tp", "sp",
                                                      "pp", "dp", "zero3", "offload", "optim"};
  lua_createtable(L, 0, 16);
  lua_pushboolean(L, r->valid), lua_setfield(L, -2, "valid");
  lua_pushboolean(L, r->fits), lua_setfield(L, -2, "fits");
  lua_pushstring(L, r->why), lua_setfield(L, -2, "why");
  lua_pushnumber(L, r->params), lua_setfield(L, -2, "params");
  lua_createtable(L, 0, PAR_MEM_COUNT + 1);
  for (int i = 0; i < PAR_MEM_COUNT; i++) lua_pushnumber(L, r->mem[i]), lua_setfield(L, -2, mem_names[i]);
  lua_pushnumber(L, r->mem_total), lua_setfield(L, -2, "total");
  lua_pushnumber(L, r->cpu_bytes_node), lua_setfield(L, -2, "cpu_per_node");
  lua_pushnumber(L, r->nvme_bytes_node), lua_setfield(L, -2, "nvme_per_node");
  lua_setfield(L, -2, "mem");
  lua_createtable(L, 0, PAR_T_COUNT + 1);
  for (int i = 0; i < PAR_T_COUNT; i++) lua_pushnumber(L, r->time[i]), lua_setfield(L, -2, time_names[i]);
  lua_pushnumber(L, r->step_time), lua_setfield(L, -2, "step");
  lua_setfield(L, -2, "time");
  lua_pushnumber(L, r->tflops_per_gpu), lua_setfield(L, -2, "tflops_per_gpu");
  lua_pushnumber(L, r->mfu), lua_setfield(L, -2, "mfu");
  lua_pushnumber(L, r->tokens_per_s), lua_setfield(L, -2, "tokens_per_s");
  lua_pushnumber(L, r->days), lua_setfield(L, -2, "days");
  lua_pushnumber(L, r->bubble_fraction), lua_setfield(L, -2, "bubble_fraction");
}

static int want_print(lua_State *L, int t) {
  int p = lua_getfield(L, t, "print") == LUA_TNIL || lua_toboolean(L, -1);
  lua_pop(L, 1);
  return p;
}

/* strata.plan{model=, parallel=, cluster=, params=, print=true} -> result table */
static int l_plan(lua_State *L) {
  par_gpt_config_t m;
  par_layout_t l;
  par_cluster_t c;
  par_plan_params_t p;
  par_plan_t r;
  luaL_checktype(L, 1, LUA_TTABLE);
  static const char *const top_keys[] = {"model", "parallel", "cluster", "params", "print", NULL};
  reject_unknown(L, 1, NULL, top_keys);
  lua_getfield(L, 1, "model"), parse_model(L, lua_gettop(L), &m);
  lua_getfield(L, 1, "parallel"), parse_layout(L, lua_gettop(L), &l);
  if (lua_getfield(L, 1, "cluster") == LUA_TNIL) plan_error(L, "plan: cluster is required");
  parse_cluster(L, lua_gettop(L), &c);
  /* data parallelism over what the other degrees leave, unless given (as recipes' parallel.dp = "auto"),
   * and a global batch of one microbatch per replica, unless given */
  int has_dp = 0, has_gb = 0;
  if (lua_getfield(L, 1, "parallel") == LUA_TTABLE) {
    has_dp = lua_getfield(L, -1, "dp") != LUA_TNIL;
    has_gb = lua_getfield(L, -2, "global_batch") != LUA_TNIL;
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  if (!has_dp) {
    int rest = c.nodes * c.gpus_per_node / (l.tp * l.pp * l.sp);
    l.dp = rest > 0 ? rest : 1;
  }
  if (!has_gb && l.global_batch < l.microbatch * l.dp) l.global_batch = l.microbatch * l.dp;
  lua_getfield(L, 1, "params"), parse_params(L, lua_gettop(L), &p);
  int rc = par_plan_estimate(&m, &l, &c, &p, &r);
  if (!r.valid) return plan_error(L, "plan: %s", r.why[0] ? r.why : "invalid layout");
  if (rc != STRATA_OK) return plan_error(L, "plan: %s", par_strerror(rc));
  if (want_print(L, 1)) {
    fflush(stdout);
    par_plan_print(stdout, &m, &l, &c, &r);
    fflush(stdout);
  }
  push_plan(L, &r);
  return 1;
}

/* strata.plan_search{model=, cluster=, global_batch=, top=5, tp_modes={"1d",...},
 * offload=false, sp=false, params=, print=true} -> list of {layout string, fits, ...} */
static int l_plan_search(lua_State *L) {
  par_gpt_config_t m;
  par_cluster_t c;
  par_plan_params_t p;
  par_search_opts_t o = PAR_SEARCH_OPTS_DEFAULTS;
  int top = 5;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "model"), parse_model(L, lua_gettop(L), &m);
  if (lua_getfield(L, 1, "cluster") == LUA_TNIL) plan_error(L, "plan_search: cluster is required");
  parse_cluster(L, lua_gettop(L), &c);
  lua_getfield(L, 1, "params"), parse_params(L, lua_gettop(L), &p);
  opt_int(L, 1, "global_batch", &o.global_batch);
  opt_int(L, 1, "max_microbatch", &o.max_microbatch);
  opt_int(L, 1, "max_zero_stage", &o.max_zero_stage);
  opt_int(L, 1, "top", &top);
  lua_getfield(L, 1, "offload"), o.try_offload = lua_toboolean(L, -1), lua_pop(L, 1);
  lua_getfield(L, 1, "sp"), o.try_sp = lua_toboolean(L, -1), lua_pop(L, 1);
  if (lua_getfield(L, 1, "tp_modes") == LUA_TTABLE) {
    static const char *const modes[] = {"1d", "2d", "2.5d", "3d", NULL};
    o.tp_modes = 0;
    for (int i = 1; lua_rawgeti(L, -1, i) != LUA_TNIL; i++) {
      const char *s = lua_tostring(L, -1);
      int k = 0;
      for (; s && modes[k]; k++)
        if (!strcmp(s, modes[k])) break;
      if (!s || !modes[k]) plan_error(L, "plan_search: tp_modes[%d] = %s: expected 1d, 2d, 2.5d or 3d", i, s ? s : "?");
      o.tp_modes |= 1 << k;
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  size_t total = 0;
  if (par_plan_search(&m, &c, &p, &o, NULL, 0, &total) != STRATA_OK)
    return plan_error(L, "plan_search: the search failed (check model and cluster)");
  par_plan_entry_t *e = lua_newuserdatauv(L, sizeof *e * (total ? total : 1), 0);
  par_plan_search(&m, &c, &p, &o, e, total, &total);
  if (want_print(L, 1)) {
    fflush(stdout);
    par_plan_search_print(stdout, e, total, (size_t)top);
    fflush(stdout);
  }
  lua_createtable(L, (int)(total < (size_t)top ? total : (size_t)top), 0);
  for (size_t i = 0; i < total && i < (size_t)top; i++) {
    const par_layout_t *l = &e[i].layout;
    push_plan(L, &e[i].plan);
    lua_pushfstring(L, "dp %d x tp %d x pp %d x sp %d, zero %d, microbatch %d", l->dp, l->tp, l->pp,
                    l->sp, l->zero_stage, l->microbatch);
    lua_setfield(L, -2, "layout");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

/* strata.reproduce(name [, print=true]) -> list of {label, unit, published, predicted, rel_err} */
static int l_reproduce(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  int print = lua_isnoneornil(L, 2) || lua_toboolean(L, 2);
  size_t count = 0;
  if (par_plan_reproduce(name, NULL, NULL, 0, &count) != STRATA_OK) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; par_plan_reproduce_name(i); i++) {
      luaL_addstring(&b, i ? ", " : "");
      luaL_addstring(&b, par_plan_reproduce_name(i));
    }
    luaL_pushresult(&b);
    return luaL_error(L, "reproduce: no published result '%s' (known: %s)", name, lua_tostring(L, -1));
  }
  par_repro_row_t *rows = lua_newuserdatauv(L, sizeof *rows * (count ? count : 1), 0);
  par_plan_reproduce(name, NULL, rows, count, &count);
  if (print) {
    fflush(stdout);
    par_plan_reproduce_print(stdout, name, NULL);
    fflush(stdout);
  }
  lua_createtable(L, (int)count, 0);
  for (size_t i = 0; i < count; i++) {
    lua_createtable(L, 0, 5);
    lua_pushstring(L, rows[i].label), lua_setfield(L, -2, "label");
    lua_pushstring(L, rows[i].unit), lua_setfield(L, -2, "unit");
    lua_pushnumber(L, rows[i].published), lua_setfield(L, -2, "published");
    lua_pushnumber(L, rows[i].predicted), lua_setfield(L, -2, "predicted");
    lua_pushnumber(L, rows[i].rel_err), lua_setfield(L, -2, "rel_err");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int l_reproductions(lua_State *L) {
  lua_newtable(L);
  for (int i = 0; par_plan_reproduce_name(i); i++) {
    lua_pushstring(L, par_plan_reproduce_name(i));
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* A cluster as a flat table of every field ("peak_flops.bf16" = ...), which
 * strata.plan takes back as its cluster. */
static void push_cluster(lua_State *L, const par_cluster_t *c) {
  lua_newtable(L);
  lua_pushstring(L, c->name), lua_setfield(L, -2, "name");
  for (int i = 0; par_cluster_key(i); i++) {
    double v = 0;
    par_cluster_get(c, par_cluster_key(i), &v);
    lua_pushnumber(L, v), lua_setfield(L, -2, par_cluster_key(i));
  }
}

/* strata.cluster(name_or_table) -> table of every cluster field */
static int l_cluster(lua_State *L) {
  par_cluster_t c;
  parse_cluster(L, 1, &c);
  push_cluster(L, &c);
  return 1;
}

/* ---------------------------------------------------------- calibration */

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The sustained rate of n x n x n matrix multiplies through libtensor on
 * `device` (TENSOR_CPU: OpenBLAS sgemm blocks on this process's threads, as
 * strata's GPT runs them; a CUDA device: cuBLAS with `dt` inputs and fp32
 * accumulation): the best of a few timed runs after a warm-up. 0 and a
 * message in err on failure. */
static double measure_gemm(int device, tensor_dtype_t dt, int n, char *err, size_t en) {
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.threads = device == TENSOR_CPU ? lstrata_threads(NULL, NULL) : 1;
  o.device = device == TENSOR_CPU ? 0 : device;
  tensor_ctx_t *tc = NULL;
  tensor_t a = {0}, b = {0}, c = {0}, f = {0};
  double best = 0;
  int rc = tensor_ctx_create(&tc, &o);
  int64_t shape[2] = {n, n};
  if (!rc) rc = tensor_alloc(tc, &f, TENSOR_F32, device, 2, shape);
  if (!rc) rc = tensor_alloc(tc, &a, dt, device, 2, shape);
  if (!rc) rc = tensor_alloc(tc, &b, dt, device, 2, shape);
  if (!rc) rc = tensor_alloc(tc, &c, TENSOR_F32, device, 2, shape);
  if (!rc) rc = tensor_fill_uniform(tc, &f, 1, "calibrate-a", NULL, -1.f, 1.f);
  if (!rc) rc = dt == TENSOR_F32 ? tensor_copy(tc, &a, &f) : tensor_cast(tc, &a, &f);
  if (!rc) rc = tensor_fill_uniform(tc, &f, 1, "calibrate-b", NULL, -1.f, 1.f);
  if (!rc) rc = dt == TENSOR_F32 ? tensor_copy(tc, &b, &f) : tensor_cast(tc, &b, &f);
  int reps = device == TENSOR_CPU ? 1 : 10;
  for (int r = 0; r < 4 && !rc; r++) { /* run 0 warms up */
    if ((rc = tensor_synchronize(tc))) break;
    double t0 = wall_now();
    for (int k = 0; k < reps && !rc; k++) rc = tensor_matmul(tc, &c, &a, &b, 0, 0, 1.f, 0.f);
    if (!rc) rc = tensor_synchronize(tc);
    double dt_s = wall_now() - t0, rate = reps * 2.0 * n * (double)n * n / dt_s;
    if (!rc && r > 0 && rate > best) best = rate;
  }
  if (rc) {
    snprintf(err, en, "%s", tc ? tensor_last_error(tc) : "cannot create a libtensor context");
    if (!err[0]) snprintf(err, en, "%s", tensor_strerror(rc));
    best = 0;
  }
  if (tc) {
    tensor_free(tc, &a), tensor_free(tc, &b), tensor_free(tc, &c), tensor_free(tc, &f);
    tensor_ctx_destroy(tc);
  }
  return best;
}

/* strata.plan_calibrate{cluster=, tflops=, precision=} or {cluster=,
 * measure=true, device="cpu"|"cuda"|"cuda:N", precision=, size=} -> the
 * cluster table with gemm_efficiency set from that sustained GEMM rate, and
 * a table of the rates used (TFLOP/s by precision). Measuring on the CPU sets
 * every precision (libtensor computes them all in fp32 there) unless one is
 * named; on a GPU each precision with a peak is measured. */
static int l_plan_calibrate(lua_State *L) {
  static const char *const keys[] = {"cluster", "tflops", "precision", "measure", "device", "size", NULL};
  static const char *const precs[] = {"fp32", "bf16", "fp16", NULL};
  luaL_checktype(L, 1, LUA_TTABLE);
  reject_unknown(L, 1, "plan_calibrate", keys);
  par_cluster_t c;
  if (lua_getfield(L, 1, "cluster") == LUA_TNIL) plan_error(L, "plan_calibrate: cluster is required");
  parse_cluster(L, lua_gettop(L), &c);
  lua_pop(L, 1);
  int prec = -1;
  opt_enum(L, 1, "precision", precs, &prec);
  lua_getfield(L, 1, "measure");
  int measure = lua_toboolean(L, -1);
  lua_pop(L, 1);
  double rate[3] = {0, 0, 0};
  if (lua_getfield(L, 1, "tflops") != LUA_TNIL) {
    if (measure) plan_error(L, "plan_calibrate: give tflops (a measured rate) or measure = true, not both");
    int ok;
    double t = lua_tonumberx(L, -1, &ok);
    if (!ok || !isfinite(t) || !(t > 0)) plan_error(L, "plan_calibrate: tflops = %s must be a positive number",
                                                      luaL_tolstring(L, -1, NULL));
    if (prec < 0) plan_error(L, "plan_calibrate: tflops needs precision = \"fp32\", \"bf16\" or \"fp16\"");
    rate[prec] = t * 1e12;
  } else if (!measure) {
    plan_error(L, "plan_calibrate: give tflops = <measured TFLOP/s> or measure = true");
  }
  lua_pop(L, 1);
  if (measure) {
    int device = tensor_cuda_device_count() > 0 ? 0 : TENSOR_CPU, n = 0;
    if (lua_getfield(L, 1, "device") != LUA_TNIL) {
      const char *d = lua_tostring(L, -1);
      if (d && !strcmp(d, "cpu")) device = TENSOR_CPU;
      else if (d && !strcmp(d, "cuda")) device = 0;
      else if (d && sscanf(d, "cuda:%d", &device) == 1 && device >= 0) {
      } else plan_error(L, "plan_calibrate: device = %s: expected \"cpu\", \"cuda\" or \"cuda:N\"", d ? d : "?");
      if (device != TENSOR_CPU && device >= tensor_cuda_device_count())
        plan_error(L, "plan_calibrate: device = %s: this build sees %d CUDA devices", d, tensor_cuda_device_count());
    }
    lua_pop(L, 1);
    opt_int(L, 1, "size", &n);
    if (n <= 0) n = device == TENSOR_CPU ? 2048 : 8192;
    for (int i = 0; i < 3; i++) {
      if (prec >= 0 && i != prec) continue;
      if (device == TENSOR_CPU && i != 0 && prec < 0) continue; /* the fp32 rate serves all three */
      if (device != TENSOR_CPU && c.peak_flops[i] <= 0 && prec < 0) continue;
      char err[256] = "";
      tensor_dtype_t dt = device == TENSOR_CPU ? TENSOR_F32 : i == 1 ? TENSOR_BF16 : i == 2 ? TENSOR_F16 : TENSOR_F32;
      double r = measure_gemm(device, dt, n, err, sizeof err);
      if (!(r > 0)) plan_error(L, "plan_calibrate: measuring %s GEMMs: %s", precs[i], err);
      rate[i] = r;
    }
    if (device == TENSOR_CPU && prec < 0) rate[1] = rate[2] = rate[0];
  }
  for (int i = 0; i < 3; i++)
    if (rate[i] > 0 && par_cluster_calibrate(&c, (par_precision_t)i, rate[i]) != STRATA_OK)
      plan_error(L, "plan_calibrate: a %s rate of %g FLOP/s is not usable", precs[i], rate[i]);
  char why[256];
  if (par_cluster_validate(&c, why, sizeof why) != STRATA_OK) plan_error(L, "plan_calibrate: %s", why);
  push_cluster(L, &c);
  lua_createtable(L, 0, 3);
  for (int i = 0; i < 3; i++)
    if (rate[i] > 0) lua_pushnumber(L, rate[i] / 1e12), lua_setfield(L, -2, precs[i]);
  return 2;
}

/* ----------------------------------------------------------- largest */

/* strata.plan_largest{model=, parallel=, cluster=, params=, grow="layers"|"hidden",
 * step=, max=, print=true} -> the plan table of the largest model of the family
 * that fits (model = its sizes, next = why one step more does not fit). */
static int l_plan_largest(lua_State *L) {
  static const char *const keys[] = {"model", "parallel", "cluster", "params", "grow", "step", "max", "print", NULL};
  static const char *const grows[] = {"layers", "hidden", NULL};
  par_gpt_config_t m, best;
  par_layout_t l;
  par_cluster_t c;
  par_plan_params_t p;
  par_plan_t r, next;
  luaL_checktype(L, 1, LUA_TTABLE);
  reject_unknown(L, 1, "plan_largest", keys);
  lua_getfield(L, 1, "model"), parse_model(L, lua_gettop(L), &m);
  lua_getfield(L, 1, "parallel"), parse_layout(L, lua_gettop(L), &l);
  if (lua_getfield(L, 1, "cluster") == LUA_TNIL) plan_error(L, "plan_largest: cluster is required");
  parse_cluster(L, lua_gettop(L), &c);
  int has_dp = 0, has_gb = 0;
  if (lua_getfield(L, 1, "parallel") == LUA_TTABLE) {
    has_dp = lua_getfield(L, -1, "dp") != LUA_TNIL;
    has_gb = lua_getfield(L, -2, "global_batch") != LUA_TNIL;
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  if (!has_dp) {
    int rest = c.nodes * c.gpus_per_node / (l.tp * l.pp * l.sp);
    l.dp = rest > 0 ? rest : 1;
  }
  if (!has_gb && l.global_batch < l.microbatch * l.dp) l.global_batch = l.microbatch * l.dp;
  lua_getfield(L, 1, "params"), parse_params(L, lua_gettop(L), &p);
  int grow = PAR_GROW_LAYERS, step = 0, max = 0;
  opt_enum(L, 1, "grow", grows, &grow);
  opt_int(L, 1, "step", &step);
  opt_int(L, 1, "max", &max);
  if (step < 0 || max < 0) plan_error(L, "plan_largest: step %d and max %d must be >= 0", step, max);
  int rc = par_plan_largest(&m, &l, &c, &p, (par_grow_t)grow, step, max, &best, &r);
  if (rc == STRATA_ENOTFOUND)
    plan_error(L, "plan_largest: not even the smallest of the family fits: %s", r.why);
  if (rc) plan_error(L, "plan_largest: %s", r.why[0] ? r.why : par_strerror(rc));
  /* why one step more does not fit (or is the limit) */
  par_gpt_config_t more = best;
  int st = step ? step : grow == PAR_GROW_LAYERS ? (l.schedule == PAR_SCHED_INTERLEAVED ? l.pp * l.interleave : 1) : 0;
  if (!st) { /* the hidden step par_plan_largest takes: lcm(heads, 128) */
    int a = m.heads, b = 128;
    while (b) { int t = a % b; a = b, b = t; }
    st = m.heads / a * 128;
  }
  if (grow == PAR_GROW_LAYERS) more.layers += st;
  else more.hidden += st;
  par_plan_estimate(&more, &l, &c, &p, &next);
  if (want_print(L, 1)) {
    fflush(stdout);
    printf("largest that fits: %d layers x hidden %d, %.4g parameters; %s %d: %s\n\n", best.layers, best.hidden,
           r.params, grow == PAR_GROW_LAYERS ? "layers" : "hidden", grow == PAR_GROW_LAYERS ? more.layers : more.hidden,
           next.valid ? (next.fits ? "fits but is past max" : next.why) : next.why);
    par_plan_print(stdout, &best, &l, &c, &r);
    fflush(stdout);
  }
  push_plan(L, &r);
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, best.layers), lua_setfield(L, -2, "layers");
  lua_pushinteger(L, best.hidden), lua_setfield(L, -2, "hidden");
  lua_pushinteger(L, best.heads), lua_setfield(L, -2, "heads");
  lua_pushinteger(L, best.seq), lua_setfield(L, -2, "seq");
  lua_pushinteger(L, best.vocab), lua_setfield(L, -2, "vocab");
  lua_pushboolean(L, best.recompute), lua_setfield(L, -2, "recompute");
  lua_setfield(L, -2, "model");
  lua_pushstring(L, next.valid ? (next.fits ? "fits but is past max" : next.why) : next.why);
  lua_setfield(L, -2, "next");
  return 1;
}

/* Under `strata plan`, strata.experiment{...} predicts instead of training:
 * the recipe's model and layout (batch per rank as the microbatch) on the
 * cluster named by the recipe's plan.cluster, else on this machine sized to
 * the layout's ranks. */
static const char plan_experiment_src[] =
    "local strata = ...\n"
    "return function(t)\n"
    "  local m = {}\n"
    "  for k, v in pairs(t.model or {}) do m[k] = v end\n"
    "  if m.vocab == nil or m.vocab == 'auto' then m.vocab = 256 end\n"
    "  local p = t.parallel or {}\n"
    "  local function deg(v) return (v == nil or v == 'auto') and 1 or v end\n"
    "  local dp, tp, pp, sp = deg(p.dp), deg(p.tp), deg(p.pp), deg(p.sp)\n"
    "  local batch = (t.train and t.train.batch) or 8\n"
    "  local cluster = t.plan and t.plan.cluster or\n"
    "    {base = 'this-machine', nodes = 1, gpus_per_node = dp * tp * pp * sp}\n"
    "  return strata.plan{model = m, cluster = cluster, parallel = {dp = dp, tp = tp, pp = pp,\n"
    "    sp = sp, zero = p.zero, microbatch = batch, global_batch = batch * dp}}\n"
    "end\n";

void lplan_enter_plan_mode(lua_State *L, int module) {
  if (luaL_loadbuffer(L, plan_experiment_src, sizeof plan_experiment_src - 1, "=[strata plan]") !=
      LUA_OK)
    lua_error(L);
  lua_pushvalue(L, module);
  lua_call(L, 1, 1);
  lua_setfield(L, module, "experiment");
  lua_pushstring(L, "plan");
  lua_setfield(L, module, "mode");
}

int luaopen_strata_plan(lua_State *L) {
  static const luaL_Reg fns[] = {{"plan", l_plan},
                                 {"plan_search", l_plan_search},
                                 {"reproduce", l_reproduce},
                                 {"reproductions", l_reproductions},
                                 {"cluster", l_cluster},
                                 {"plan_calibrate", l_plan_calibrate},
                                 {"plan_largest", l_plan_largest},
                                 {NULL, NULL}};
  luaL_newlib(L, fns);
  return 1;
}
