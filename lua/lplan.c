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
 * Every input is checked where the recipe writes it (FILE:LINE, exit status
 * 2): unknown keys (listing the known ones), integers read as 64 bits and
 * range-checked into their C types, switches true or false only, enums by
 * name, cluster fields and planner parameters in their ranges
 * (par_cluster_check, par_plan_params_check), a layout the planner cannot
 * place. Without a precision, the planner's default
 * (par_plan_default_precision: bf16 mixed precision, fp16 without bf16). */
#include <limits.h>
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

/* A value as messages show it: strings quoted, as the recipe schema does. */
static const char *shown(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) == LUA_TSTRING) return lua_pushfstring(L, "\"%s\"", lua_tostring(L, idx));
  return luaL_tolstring(L, idx, NULL);
}

/* "section.key", or "key" for a function's own options (section NULL). */
static const char *path_of(lua_State *L, const char *section, const char *key) {
  return section ? lua_pushfstring(L, "%s.%s", section, key) : lua_pushstring(L, key);
}

/* The integer at idx, read as 64 bits (a float with a whole value counts)
 * and range-checked into lo..hi, the C type's range at most. */
static int check_int(lua_State *L, const char *fn, int idx, const char *path, long long lo, long long hi) {
  int ok = 0;
  lua_Integer v = 0;
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TNUMBER)
    plan_error(L, "%s: %s = %s: expected an integer, got a %s", fn, path, shown(L, idx),
               luaL_typename(L, idx));
  v = lua_tointegerx(L, idx, &ok);
  if (!ok || v < lo || v > hi) plan_error(L, "%s: %s = %s: must be an integer in %lld..%lld", fn, path, shown(L, idx), lo, hi);
  return (int)v;
}

static int opt_int(lua_State *L, const char *fn, int t, const char *section, const char *key, long long lo,
                   long long hi, int *dst) {
  int present = lua_getfield(L, t, key) != LUA_TNIL, v = lua_gettop(L);
  if (present) *dst = check_int(L, fn, v, path_of(L, section, key), lo, hi), lua_pop(L, 1);
  lua_pop(L, 1);
  return present;
}

/* true or false, nothing else ("no" is not false). */
static int opt_bool(lua_State *L, const char *fn, int t, const char *section, const char *key, int *dst) {
  int present = lua_getfield(L, t, key) != LUA_TNIL, v = lua_gettop(L);
  if (present && lua_type(L, v) != LUA_TBOOLEAN) {
    const char *path = path_of(L, section, key);
    plan_error(L, "%s: %s = %s: expected true or false", fn, path, shown(L, v));
  }
  if (present) *dst = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return present;
}

/* The index of string s in a NULL-terminated list, else an error listing them. */
static int enum_index(lua_State *L, const char *fn, int idx, const char *path, const char *const *names) {
  const char *s = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
  int i = 0;
  for (; s && names[i]; i++)
    if (!strcmp(s, names[i])) break;
  if (!s || !names[i]) {
    luaL_Buffer b;
    const char *val = shown(L, idx);
    luaL_buffinit(L, &b);
    for (int j = 0; names[j]; j++) {
      luaL_addstring(&b, j ? ", " : "");
      luaL_addstring(&b, names[j]);
    }
    luaL_pushresult(&b);
    plan_error(L, "%s: %s = %s: expected one of %s", fn, path, val, lua_tostring(L, -1));
  }
  return i;
}

/* A string field mapped onto an enum by a NULL-terminated list of names. */
static int opt_enum(lua_State *L, const char *fn, int t, const char *section, const char *key,
                    const char *const *names, int *dst) {
  int present = lua_getfield(L, t, key) != LUA_TNIL, v = lua_gettop(L);
  if (present) *dst = enum_index(L, fn, v, path_of(L, section, key), names), lua_pop(L, 1);
  lua_pop(L, 1);
  return present;
}

/* One name or a list of them, as a bit mask of their indices (plan_search's
 * options that either fix a setting or list the values to try). */
static int opt_enum_mask(lua_State *L, const char *fn, int t, const char *key, const char *const *names,
                         int *mask) {
  int type = lua_getfield(L, t, key);
  if (type == LUA_TNIL) {
    lua_pop(L, 1);
    return 0;
  }
  *mask = 0;
  if (type != LUA_TTABLE) {
    *mask = 1 << enum_index(L, fn, lua_gettop(L), key, names);
  } else {
    lua_Integer n = luaL_len(L, -1);
    lua_pushnil(L);
    while (lua_next(L, -2)) { /* a list: keys 1..n and nothing else */
      if (!lua_isinteger(L, -2) || lua_tointeger(L, -2) < 1 || lua_tointeger(L, -2) > n)
        plan_error(L, "%s: %s: expected a name or a list of names, got the key %s", fn, key, shown(L, -2));
      lua_pop(L, 1);
    }
    if (n == 0) plan_error(L, "%s: %s = {}: an empty list tries nothing", fn, key);
    for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti(L, -1, i);
      int v = lua_gettop(L);
      *mask |= 1 << enum_index(L, fn, v, lua_pushfstring(L, "%s[%d]", key, (int)i), names);
      lua_pop(L, 2);
    }
  }
  lua_pop(L, 1);
  return 1;
}

static const char *const model_keys[] = {"layers", "hidden", "heads", "seq", "vocab", "recompute",
                                         NULL};
static const char *const layout_keys[] = {
    "dp", "tp", "pp", "sp", "zero", "tp_mode", "tp_depth", "microbatch", "global_batch", "schedule",
    "interleave", "precision", "offload_optimizer", "offload_gradients", "offload_params", "seq_parallel",
    "partition_activations", "checkpoint_cpu", NULL};
static const char *const mode_names[] = {"1d", "2d", "2.5d", "3d", NULL};
static const char *const sched_names[] = {"gpipe", "1f1b", "interleaved", NULL};
static const char *const prec_names[] = {"fp32", "bf16", "fp16", NULL};
static const char *const tier_names[] = {"device", "cpu", "nvme", NULL};

/* An error for the first key of table t that is not in keys (or not a
 * string), listing the keys; section NULL: the function's own options. */
static void reject_unknown(lua_State *L, const char *fn, int t, const char *section, const char *const *keys) {
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    int i = 0;
    for (; k && keys[i]; i++)
      if (!strcmp(k, keys[i])) break;
    if (k && keys[i]) continue;
    luaL_Buffer b;
    const char *name = k ? k : shown(L, -1);
    luaL_buffinit(L, &b);
    for (int j = 0; keys[j]; j++) {
      luaL_addstring(&b, j ? ", " : "");
      luaL_addstring(&b, keys[j]);
    }
    luaL_pushresult(&b);
    if (!section) plan_error(L, "%s: unknown key '%s' (keys: %s)", fn, name, lua_tostring(L, -1));
    plan_error(L, "%s: unknown key %s.%s (keys: %s)", fn, section, name, lua_tostring(L, -1));
  }
}

#define INT_RANGE 1, INT_MAX /* a size or a degree: 1 up to what a C int holds */

/* Returns whether model.recompute was given. */
static int parse_model(lua_State *L, const char *fn, int t, par_gpt_config_t *m) {
  *m = (par_gpt_config_t)PAR_GPT_CONFIG_DEFAULTS;
  if (lua_type(L, t) != LUA_TTABLE) plan_error(L, "%s: model must be a table, got %s", fn, luaL_typename(L, t));
  reject_unknown(L, fn, t, "model", model_keys);
  opt_int(L, fn, t, "model", "layers", INT_RANGE, &m->layers);
  opt_int(L, fn, t, "model", "hidden", INT_RANGE, &m->hidden);
  opt_int(L, fn, t, "model", "heads", INT_RANGE, &m->heads);
  opt_int(L, fn, t, "model", "seq", INT_RANGE, &m->seq);
  opt_int(L, fn, t, "model", "vocab", INT_RANGE, &m->vocab);
  return opt_bool(L, fn, t, "model", "recompute", &m->recompute);
}

/* What a strata.plan layout table set of the defaults it leaves. */
typedef struct {
  int dp, global_batch, precision;
} given_t;

static void parse_layout(lua_State *L, const char *fn, int t, par_layout_t *l, given_t *g) {
  int v;
  *l = (par_layout_t)PAR_LAYOUT_DEFAULTS;
  memset(g, 0, sizeof *g);
  if (lua_isnoneornil(L, t)) return;
  if (lua_type(L, t) != LUA_TTABLE) plan_error(L, "%s: parallel must be a table, got %s", fn, luaL_typename(L, t));
  reject_unknown(L, fn, t, "parallel", layout_keys);
  g->dp = opt_int(L, fn, t, "parallel", "dp", INT_RANGE, &l->dp);
  opt_int(L, fn, t, "parallel", "tp", INT_RANGE, &l->tp);
  opt_int(L, fn, t, "parallel", "pp", INT_RANGE, &l->pp);
  opt_int(L, fn, t, "parallel", "sp", INT_RANGE, &l->sp);
  opt_int(L, fn, t, "parallel", "zero", 0, 3, &l->zero_stage);
  opt_int(L, fn, t, "parallel", "tp_depth", INT_RANGE, &l->tp_depth);
  opt_int(L, fn, t, "parallel", "microbatch", INT_RANGE, &l->microbatch);
  g->global_batch = opt_int(L, fn, t, "parallel", "global_batch", INT_RANGE, &l->global_batch);
  opt_int(L, fn, t, "parallel", "interleave", INT_RANGE, &l->interleave);
  opt_bool(L, fn, t, "parallel", "seq_parallel", &l->seq_parallel);
  opt_bool(L, fn, t, "parallel", "partition_activations", &l->partition_activations);
  opt_bool(L, fn, t, "parallel", "checkpoint_cpu", &l->checkpoint_cpu);
  v = l->tp_mode, opt_enum(L, fn, t, "parallel", "tp_mode", mode_names, &v), l->tp_mode = (par_tp_mode_t)v;
  v = l->schedule, opt_enum(L, fn, t, "parallel", "schedule", sched_names, &v), l->schedule = (par_schedule_t)v;
  v = l->precision, g->precision = opt_enum(L, fn, t, "parallel", "precision", prec_names, &v);
  l->precision = (par_precision_t)v;
  v = l->offload_optimizer, opt_enum(L, fn, t, "parallel", "offload_optimizer", tier_names, &v);
  l->offload_optimizer = (par_tier_t)v;
  v = l->offload_gradients, opt_enum(L, fn, t, "parallel", "offload_gradients", tier_names, &v);
  l->offload_gradients = (par_tier_t)v;
  v = l->offload_params, opt_enum(L, fn, t, "parallel", "offload_params", tier_names, &v);
  l->offload_params = (par_tier_t)v;
}

/* One cluster field: a number in the key's range (par_cluster_check). */
static void set_cluster_key(lua_State *L, const char *fn, par_cluster_t *c, const char *key, int idx) {
  char why[256];
  idx = lua_absindex(L, idx);
  if (par_cluster_check(key, 0, NULL, 0) == STRATA_ENOTFOUND) plan_error(L, "%s: unknown cluster key '%s'", fn, key);
  if (lua_type(L, idx) != LUA_TNUMBER)
    plan_error(L, "%s: cluster.%s = %s: expected a number, got a %s", fn, key, shown(L, idx), luaL_typename(L, idx));
  if (par_cluster_check(key, lua_tonumber(L, idx), why, sizeof why) != STRATA_OK)
    plan_error(L, "%s: cluster.%s", fn, why);
  par_cluster_set(c, key, lua_tonumber(L, idx));
}

static void parse_cluster(lua_State *L, const char *fn, int t, par_cluster_t *c) {
  char why[256] = "";
  t = lua_absindex(L, t);
  *c = (par_cluster_t)PAR_CLUSTER_DEFAULTS;
  if (lua_type(L, t) == LUA_TSTRING) {
    if (par_cluster_preset(lua_tostring(L, t), c, why, sizeof why) != STRATA_OK)
      plan_error(L, "%s: %s", fn, why);
    return;
  }
  if (lua_type(L, t) != LUA_TTABLE)
    plan_error(L, "%s: cluster must be a preset name or a table, got %s", fn, luaL_typename(L, t));
  int bt = lua_getfield(L, t, "base");
  if (bt != LUA_TNIL && bt != LUA_TSTRING)
    plan_error(L, "%s: cluster.base = %s: expected a preset name", fn, shown(L, -1));
  if (bt == LUA_TSTRING && par_cluster_preset(lua_tostring(L, -1), c, why, sizeof why) != STRATA_OK)
    plan_error(L, "%s: cluster.base: %s", fn, why);
  lua_pop(L, 1);
  lua_pushnil(L);
  while (lua_next(L, t)) {
    if (lua_type(L, -2) != LUA_TSTRING) plan_error(L, "%s: cluster: a key %s is not a field name", fn, shown(L, -2));
    const char *k = lua_tostring(L, -2);
    if (!strcmp(k, "base")) {
    } else if (!strcmp(k, "name")) {
      if (lua_type(L, -1) != LUA_TSTRING) plan_error(L, "%s: cluster.name = %s: expected a string", fn, shown(L, -1));
      snprintf(c->name, sizeof c->name, "%s", lua_tostring(L, -1));
    } else if (lua_type(L, -1) == LUA_TTABLE) { /* peak_flops = {fp32 = ...}, as in recipes/clusters */
      if (strcmp(k, "peak_flops") != 0 && strcmp(k, "gemm_efficiency") != 0)
        plan_error(L, "%s: cluster.%s: only peak_flops and gemm_efficiency are tables (by precision)", fn, k);
      lua_pushnil(L);
      while (lua_next(L, -2)) {
        if (lua_type(L, -2) != LUA_TSTRING) plan_error(L, "%s: cluster.%s: a key %s is not a precision", fn, k, shown(L, -2));
        const char *full = lua_pushfstring(L, "%s.%s", k, lua_tostring(L, -2));
        set_cluster_key(L, fn, c, full, -2);
        lua_pop(L, 2);
      }
    } else {
      set_cluster_key(L, fn, c, k, -1);
    }
    lua_pop(L, 1);
  }
  if (par_cluster_validate(c, why, sizeof why) != STRATA_OK) plan_error(L, "%s: cluster: %s", fn, why);
}

static void parse_params(lua_State *L, const char *fn, int t, par_plan_params_t *p) {
  char why[256];
  t = lua_absindex(L, t);
  *p = (par_plan_params_t)PAR_PLAN_PARAMS_DEFAULTS;
  if (lua_isnoneornil(L, t)) return;
  if (lua_type(L, t) == LUA_TSTRING) { /* "engine": strata's own GPT and engine */
    if (strcmp(lua_tostring(L, t), "engine") != 0)
      plan_error(L, "%s: params = \"%s\": a table of planner parameters, or \"engine\"", fn, lua_tostring(L, t));
    par_plan_params_engine(p);
    return;
  }
  if (lua_type(L, t) != LUA_TTABLE)
    plan_error(L, "%s: params must be a table of planner parameters or \"engine\", got %s", fn, luaL_typename(L, t));
  int bt = lua_getfield(L, t, "base");
  if (bt != LUA_TNIL) { /* {base = "engine", gemm_efficiency = ...} */
    if (bt != LUA_TSTRING || strcmp(lua_tostring(L, -1), "engine") != 0)
      plan_error(L, "%s: params.base = %s: only \"engine\" is a base", fn, shown(L, -1));
    par_plan_params_engine(p);
  }
  lua_pop(L, 1);
  lua_pushnil(L);
  while (lua_next(L, t)) {
    if (lua_type(L, -2) != LUA_TSTRING) plan_error(L, "%s: params: a key %s is not a parameter name", fn, shown(L, -2));
    const char *k = lua_tostring(L, -2);
    if (!strcmp(k, "base")) {
      lua_pop(L, 1);
      continue;
    }
    if (par_plan_params_check(k, 0, NULL, 0) == STRATA_ENOTFOUND)
      plan_error(L, "%s: params.%s is not a planner parameter (docs/planner.md lists them)", fn, k);
    if (lua_type(L, -1) != LUA_TNUMBER) {
      const char *type = luaL_typename(L, -1);
      plan_error(L, "%s: params.%s = %s: expected a number, got a %s", fn, k, shown(L, -1), type);
    }
    if (par_plan_params_check(k, lua_tonumber(L, -1), why, sizeof why) != STRATA_OK)
      plan_error(L, "%s: params.%s", fn, why);
    par_plan_params_set(p, k, lua_tonumber(L, -1));
    lua_pop(L, 1);
  }
  if (par_plan_params_validate(p, why, sizeof why) != STRATA_OK) plan_error(L, "%s: params.%s", fn, why);
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

static int want_print(lua_State *L, const char *fn, int t) {
  int p = 1;
  opt_bool(L, fn, t, NULL, "print", &p);
  return p;
}

/* A layout as a table of strata.plan's parallel keys (to plan it again). */
static void push_layout(lua_State *L, const par_layout_t *l) {
  lua_createtable(L, 0, 16);
  lua_pushinteger(L, l->dp), lua_setfield(L, -2, "dp");
  lua_pushinteger(L, l->tp), lua_setfield(L, -2, "tp");
  lua_pushinteger(L, l->pp), lua_setfield(L, -2, "pp");
  lua_pushinteger(L, l->sp), lua_setfield(L, -2, "sp");
  lua_pushinteger(L, l->zero_stage), lua_setfield(L, -2, "zero");
  lua_pushstring(L, mode_names[l->tp_mode]), lua_setfield(L, -2, "tp_mode");
  lua_pushinteger(L, l->tp_depth), lua_setfield(L, -2, "tp_depth");
  lua_pushinteger(L, l->microbatch), lua_setfield(L, -2, "microbatch");
  lua_pushinteger(L, l->global_batch), lua_setfield(L, -2, "global_batch");
  lua_pushstring(L, sched_names[l->schedule]), lua_setfield(L, -2, "schedule");
  lua_pushinteger(L, l->interleave), lua_setfield(L, -2, "interleave");
  lua_pushstring(L, prec_names[l->precision]), lua_setfield(L, -2, "precision");
  lua_pushstring(L, tier_names[l->offload_optimizer]), lua_setfield(L, -2, "offload_optimizer");
  lua_pushstring(L, tier_names[l->offload_gradients]), lua_setfield(L, -2, "offload_gradients");
  lua_pushstring(L, tier_names[l->offload_params]), lua_setfield(L, -2, "offload_params");
}

/* strata.plan{model=, parallel=, cluster=, params=, print=true} -> result table */
static int l_plan(lua_State *L) {
  static const char *const top_keys[] = {"model", "parallel", "cluster", "params", "print", NULL};
  const char *fn = "plan";
  par_gpt_config_t m;
  par_layout_t l;
  par_cluster_t c;
  par_plan_params_t p;
  par_plan_t r;
  given_t g;
  luaL_checktype(L, 1, LUA_TTABLE);
  reject_unknown(L, fn, 1, NULL, top_keys);
  int print = want_print(L, fn, 1);
  if (lua_getfield(L, 1, "model") == LUA_TNIL) plan_error(L, "plan: model is required");
  parse_model(L, fn, lua_gettop(L), &m);
  lua_getfield(L, 1, "parallel"), parse_layout(L, fn, lua_gettop(L), &l, &g);
  if (lua_getfield(L, 1, "cluster") == LUA_TNIL) plan_error(L, "plan: cluster is required");
  parse_cluster(L, fn, lua_gettop(L), &c);
  lua_getfield(L, 1, "params"), parse_params(L, fn, lua_gettop(L), &p);
  /* data parallelism over what the other degrees leave, unless given (as recipes' parallel.dp = "auto"),
   * a global batch of one microbatch per replica, unless given, and the planner's precision */
  if (!g.dp) { /* (in double: three degrees of up to INT_MAX each) */
    double rest = floor((double)c.nodes * c.gpus_per_node / ((double)l.tp * l.pp * l.sp));
    l.dp = rest >= 1 ? (int)rest : 1;
  }
  if (!g.global_batch && (long long)l.microbatch * l.dp <= INT_MAX) l.global_batch = l.microbatch * l.dp;
  if (!g.precision) l.precision = par_plan_default_precision(&c);
  int rc = par_plan_estimate(&m, &l, &c, &p, &r);
  if (!r.valid) return plan_error(L, "plan: %s", r.why[0] ? r.why : "invalid layout");
  if (rc != STRATA_OK) return plan_error(L, "plan: %s", par_strerror(rc));
  if (print) {
    fflush(stdout);
    par_plan_print(stdout, &m, &l, &c, &r);
    fflush(stdout);
  }
  push_plan(L, &r);
  push_layout(L, &l);
  lua_setfield(L, -2, "parallel");
  return 1;
}

/* strata.plan_search{model=, cluster=, global_batch=, params=, top=5, max_microbatch=8,
 * max_zero_stage=3, tp_modes={"1d",...}, precision=, schedule=, interleave=, offload=false,
 * sp=false, print=true} -> list of the top layouts {layout = "...", parallel = {...},
 * recompute, fits, ...}; list.rejected = {{cause, count, why, layout}, ...} */
static int l_plan_search(lua_State *L) {
  static const char *const keys[] = {"model", "cluster", "params", "global_batch", "top", "max_microbatch",
                                     "max_zero_stage", "tp_modes", "precision", "schedule", "interleave",
                                     "offload", "sp", "print", NULL};
  const char *fn = "plan_search";
  par_gpt_config_t m;
  par_cluster_t c;
  par_plan_params_t p;
  par_search_opts_t o = PAR_SEARCH_OPTS_DEFAULTS;
  int top = 5;
  luaL_checktype(L, 1, LUA_TTABLE);
  reject_unknown(L, fn, 1, NULL, keys);
  int print = want_print(L, fn, 1);
  if (lua_getfield(L, 1, "model") == LUA_TNIL) plan_error(L, "plan_search: model is required");
  /* the model's recompute when given, else both tried */
  o.try_recompute = !parse_model(L, fn, lua_gettop(L), &m);
  if (lua_getfield(L, 1, "cluster") == LUA_TNIL) plan_error(L, "plan_search: cluster is required");
  parse_cluster(L, fn, lua_gettop(L), &c);
  lua_getfield(L, 1, "params"), parse_params(L, fn, lua_gettop(L), &p);
  if (!opt_int(L, fn, 1, NULL, "global_batch", INT_RANGE, &o.global_batch))
    plan_error(L, "plan_search: global_batch is required: the sequences of one optimizer step, which "
                  "every layout searched shares (e.g. global_batch = 512)");
  opt_int(L, fn, 1, NULL, "max_microbatch", 1, 1 << 20, &o.max_microbatch);
  opt_int(L, fn, 1, NULL, "max_zero_stage", 0, 3, &o.max_zero_stage);
  opt_int(L, fn, 1, NULL, "top", 1, INT_MAX, &top);
  opt_bool(L, fn, 1, NULL, "offload", &o.try_offload);
  opt_bool(L, fn, 1, NULL, "sp", &o.try_sp);
  opt_enum_mask(L, fn, 1, "tp_modes", mode_names, &o.tp_modes);
  if (opt_enum_mask(L, fn, 1, "precision", prec_names, &o.precisions))
    for (int k = 0; k < 3; k++)
      if (((o.precisions >> k) & 1) && !(c.peak_flops[k] > 0))
        plan_error(L, "plan_search: precision %s: cluster '%s' has no %s peak (the GPU lacks it)", prec_names[k],
                   c.name, prec_names[k]);
  opt_enum_mask(L, fn, 1, "schedule", sched_names, &o.schedules);
  int it = lua_getfield(L, 1, "interleave");
  if (it != LUA_TNIL) { /* chunks per stage: a number or a list of them, 2..30 */
    if (!((o.schedules >> PAR_SCHED_INTERLEAVED) & 1))
      plan_error(L, "plan_search: interleave = %s: needs schedule = \"interleaved\" (or a list holding it)",
                 shown(L, -1));
    if (it != LUA_TTABLE) {
      o.interleaves = 1 << check_int(L, fn, -1, "interleave", 2, 30);
    } else {
      lua_Integer n = luaL_len(L, -1);
      if (n == 0) plan_error(L, "plan_search: interleave = {}: an empty list tries nothing");
      for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        int v = lua_gettop(L);
        o.interleaves |= 1 << check_int(L, fn, v, lua_pushfstring(L, "interleave[%d]", (int)i), 2, 30);
        lua_pop(L, 2);
      }
    }
  }
  lua_pop(L, 1);
  size_t total = 0;
  int rc = par_plan_search(&m, &c, &p, &o, NULL, 0, &total);
  if (rc != STRATA_OK) return plan_error(L, "plan_search: %s", par_strerror(rc));
  par_plan_entry_t *e = lua_newuserdatauv(L, sizeof *e * (total ? total : 1), 0);
  rc = par_plan_search(&m, &c, &p, &o, e, total, &total);
  if (rc != STRATA_OK) return plan_error(L, "plan_search: %s", par_strerror(rc));
  if (print) {
    fflush(stdout);
    par_plan_search_print(stdout, e, total, (size_t)top);
    fflush(stdout);
  }
  lua_createtable(L, (int)(total < (size_t)top ? total : (size_t)top), 1);
  for (size_t i = 0; i < total && i < (size_t)top; i++) {
    const par_layout_t *l = &e[i].layout;
    push_plan(L, &e[i].plan);
    lua_pushfstring(L, "dp %d x tp %d x pp %d x sp %d, zero %d, microbatch %d, %s", l->dp, l->tp, l->pp, l->sp,
                    l->zero_stage, l->microbatch, prec_names[l->precision]);
    if (l->pp > 1) lua_pushfstring(L, "%s, %s", lua_tostring(L, -1), sched_names[l->schedule]), lua_remove(L, -2);
    if (l->pp > 1 && l->schedule == PAR_SCHED_INTERLEAVED)
      lua_pushfstring(L, "%s x%d", lua_tostring(L, -1), l->interleave), lua_remove(L, -2);
    lua_setfield(L, -2, "layout");
    push_layout(L, l);
    lua_setfield(L, -2, "parallel");
    lua_pushboolean(L, e[i].recompute), lua_setfield(L, -2, "recompute");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  /* every cause of rejection: {cause = "... # ...", count = n, why = the first's reason, index = its rank} */
  size_t nc = 0;
  par_plan_search_causes(e, total, NULL, 0, &nc);
  par_plan_cause_t *cs = lua_newuserdatauv(L, sizeof *cs * (nc ? nc : 1), 0);
  if (par_plan_search_causes(e, total, cs, nc, &nc) != STRATA_OK) return plan_error(L, "plan_search: out of memory");
  lua_createtable(L, (int)nc, 0);
  for (size_t k = 0; k < nc; k++) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, cs[k].cause), lua_setfield(L, -2, "cause");
    lua_pushinteger(L, (lua_Integer)cs[k].count), lua_setfield(L, -2, "count");
    lua_pushstring(L, e[cs[k].first].plan.why), lua_setfield(L, -2, "why");
    lua_pushinteger(L, (lua_Integer)cs[k].first + 1), lua_setfield(L, -2, "index");
    push_layout(L, &e[cs[k].first].layout);
    lua_setfield(L, -2, "parallel");
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  lua_setfield(L, -3, "rejected");
  lua_pop(L, 1); /* the causes' buffer */
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
  parse_cluster(L, "cluster", 1, &c);
  push_cluster(L, &c);
  return 1;
}

/* ---------------------------------------------------------- calibration */

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
  const char *fn = "plan_calibrate";
  reject_unknown(L, fn, 1, NULL, keys);
  par_cluster_t c;
  if (lua_getfield(L, 1, "cluster") == LUA_TNIL) plan_error(L, "plan_calibrate: cluster is required");
  parse_cluster(L, fn, lua_gettop(L), &c);
  lua_pop(L, 1);
  int prec = -1;
  opt_enum(L, fn, 1, NULL, "precision", precs, &prec);
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
    opt_int(L, fn, 1, NULL, "size", 1, 1 << 15, &n);
    if (n <= 0) n = device == TENSOR_CPU ? 2048 : 8192;
    for (int i = 0; i < 3; i++) {
      if (prec >= 0 && i != prec) continue;
      if (device == TENSOR_CPU && i != 0 && prec < 0) continue; /* the fp32 rate serves all three */
      if (device != TENSOR_CPU && c.peak_flops[i] <= 0 && prec < 0) continue;
      char err[256] = "";
      tensor_dtype_t dt = device == TENSOR_CPU ? TENSOR_F32 : i == 1 ? TENSOR_BF16 : i == 2 ? TENSOR_F16 : TENSOR_F32;
      double r = lstrata_measure_gemm(device, dt, n, err, sizeof err);
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
  const char *fn = "plan_largest";
  given_t g;
  reject_unknown(L, fn, 1, NULL, keys);
  if (lua_getfield(L, 1, "model") == LUA_TNIL) plan_error(L, "plan_largest: model is required");
  parse_model(L, fn, lua_gettop(L), &m);
  lua_getfield(L, 1, "parallel"), parse_layout(L, fn, lua_gettop(L), &l, &g);
  if (lua_getfield(L, 1, "cluster") == LUA_TNIL) plan_error(L, "plan_largest: cluster is required");
  parse_cluster(L, fn, lua_gettop(L), &c);
  /* as strata.plan: dp over what the other degrees leave, a global batch of one microbatch a replica and
   * the planner's precision, unless given */
  if (!g.dp) {
    double rest = floor((double)c.nodes * c.gpus_per_node / ((double)l.tp * l.pp * l.sp));
    l.dp = rest >= 1 ? (int)rest : 1;
  }
  if (!g.global_batch && (long long)l.microbatch * l.dp <= INT_MAX) l.global_batch = l.microbatch * l.dp;
  if (!g.precision) l.precision = par_plan_default_precision(&c);
  lua_getfield(L, 1, "params"), parse_params(L, fn, lua_gettop(L), &p);
  int grow = PAR_GROW_LAYERS, step = 0, max = 0;
  opt_enum(L, fn, 1, NULL, "grow", grows, &grow);
  opt_int(L, fn, 1, NULL, "step", 0, INT_MAX, &step);
  opt_int(L, fn, 1, NULL, "max", 0, INT_MAX, &max);
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
  if (want_print(L, fn, 1)) {
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

/* Under `strata plan`, strata.experiment{...} validates the recipe and the
 * command line as under `strata run`, then predicts instead of training
 * (M.plan_experiment, lua/experiment.lua). */
void lplan_enter_plan_mode(lua_State *L, int module) {
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
