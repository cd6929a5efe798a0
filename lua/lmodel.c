/* Lower-level bindings for recipes that write their own training loop:
 * strata.gpt{...} (userdata "strata.gpt": forward, backward, parameters and
 * gradients as float views) and strata.optimizer{...} (userdata
 * "strata.optimizer" over a model's views: clipping, schedule, step).
 * Collectives are strata.allreduce; checkpoints strata.checkpoint. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <strata/optim.h>
#include <strata/parallel.h>

#include "strata_lua.h"

#define GPT_MT "strata.gpt"
#define OPT_MT "strata.optimizer"

typedef struct {
  par_gpt_t *model; /* NULL when closed */
} lgpt_t;

static int gpt_close(lua_State *L) {
  lgpt_t *u = luaL_checkudata(L, 1, GPT_MT);
  par_gpt_destroy(u->model);
  u->model = NULL;
  return 0;
}

static lgpt_t *togpt(lua_State *L, int idx) {
  lgpt_t *u = luaL_checkudata(L, idx, GPT_MT);
  if (!u->model) luaL_argerror(L, idx, "closed model");
  return u;
}

static int field_int(lua_State *L, int t, const char *k, int def) {
  int v = def;
  if (lua_getfield(L, t, k) != LUA_TNIL) {
    int ok;
    lua_Integer x = lua_tointegerx(L, -1, &ok);
    if (!ok || x < 0 || x > (1 << 30)) luaL_error(L, "'%s' must be a non-negative integer", k);
    v = (int)x;
  }
  lua_pop(L, 1);
  return v;
}
static double field_num(lua_State *L, int t, const char *k, double def) {
  double v = def;
  if (lua_getfield(L, t, k) != LUA_TNIL) {
    int ok;
    v = lua_tonumberx(L, -1, &ok);
    if (!ok) luaL_error(L, "'%s' must be a number", k);
  }
  lua_pop(L, 1);
  return v;
}

/* strata.gpt{layers=, hidden=, heads=, seq=, vocab=, recompute=, seed=}
 * strata.gpt{init = PATH [, recompute=]}: the configuration and weights of
 *   a strata checkpoint, an llm.c model file or a Hugging Face safetensors
 *   (sizes given beside init must agree with the file's)
 * -> model | nil, message, code */
static int gpt_new(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lgpt_t *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->model = NULL;
  luaL_setmetatable(L, GPT_MT);
  par_gpt_config_t c = PAR_GPT_CONFIG_DEFAULTS;
  char err[1024];
  lua_getfield(L, 1, "init");
  const char *init = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
  lua_pop(L, 1); /* the string stays in the argument table */
  if (init) {
    par_model_format_t f;
    lstrata_world(L); /* strata checkpoints are read through MPI-IO */
    int rc = par_model_probe(init, &f, &c, err, sizeof err);
    if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
    static const char *const keys[] = {"layers", "hidden", "heads", "seq", "vocab"};
    int have[] = {c.layers, c.hidden, c.heads, c.seq, c.vocab};
    for (int i = 0; i < 5; i++) {
      int v = field_int(L, 1, keys[i], have[i]);
      if (v != have[i])
        return lstrata_fail(L, lua_pushfstring(L, "%s = %d, but '%s' holds a model of %s = %d", keys[i], v, init,
                                               keys[i], have[i]),
                            STRATA_ESHAPE);
    }
  } else {
    c.layers = field_int(L, 1, "layers", c.layers);
    c.hidden = field_int(L, 1, "hidden", c.hidden);
    c.heads = field_int(L, 1, "heads", c.heads);
    c.seq = field_int(L, 1, "seq", c.seq);
    c.vocab = field_int(L, 1, "vocab", c.vocab);
  }
  lua_getfield(L, 1, "recompute");
  c.recompute = lua_toboolean(L, -1);
  lua_pop(L, 1);
  uint64_t seed = (uint64_t)field_int(L, 1, "seed", 1);
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  o.threads = lstrata_threads(NULL, NULL);
  int rc = par_gpt_create_ex(&u->model, &c, &o, seed);
  if (rc != STRATA_OK) return lstrata_fail(L, par_gpt_create_error(), rc);
  if (init && (rc = par_model_read(init, u->model, err, sizeof err)) != STRATA_OK) return lstrata_fail(L, err, rc);
  return 1;
}

/* strata.model_config(path) -> {layers=, hidden=, heads=, seq=, vocab=, format=}
 * | nil, message, code: the model a file holds (any of strata's formats) */
static int model_config(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  par_gpt_config_t c;
  par_model_format_t f;
  char err[1024];
  lstrata_world(L);
  int rc = par_model_probe(path, &f, &c, err, sizeof err);
  if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
  lua_createtable(L, 0, 6);
  int v[] = {c.layers, c.hidden, c.heads, c.seq, c.vocab};
  const char *k[] = {"layers", "hidden", "heads", "seq", "vocab"};
  for (int i = 0; i < 5; i++) {
    lua_pushinteger(L, v[i]);
    lua_setfield(L, -2, k[i]);
  }
  lua_pushstring(L, par_model_format_name(f));
  lua_setfield(L, -2, "format");
  return 1;
}

/* m:generate(prompt, {n=, temperature=, top_k=, seed=, eot=}) -> {ids...}
 * prompt: a table or strata.ints of token ids; up to n tokens after it
 * (default 100), stopping at eot or where the model's positions end. */
static int gpt_generate(lua_State *L) {
  lgpt_t *u = togpt(L, 1);
  size_t np;
  int32_t *prompt;
  if (lua_istable(L, 2)) { /* copied into a userdata the collector frees */
    np = lua_rawlen(L, 2);
    prompt = lua_newuserdatauv(L, (np ? np : 1) * sizeof *prompt, 0);
    for (size_t i = 0; i < np; i++) {
      lua_rawgeti(L, 2, (lua_Integer)i + 1);
      int ok;
      lua_Integer v = lua_tointegerx(L, -1, &ok);
      luaL_argcheck(L, ok, 2, "token ids must be integers");
      prompt[i] = (int32_t)v;
      lua_pop(L, 1);
    }
  } else {
    lstrata_buf_t *b = lstrata_checkbuf(L, 2, 1);
    prompt = b->p, np = b->n;
  }
  int opts = lua_istable(L, 3) ? 3 : 0;
  par_sample_options_t so = PAR_SAMPLE_DEFAULTS;
  int n = 100, eot = -1;
  if (opts) {
    n = field_int(L, opts, "n", n);
    so.temperature = field_num(L, opts, "temperature", so.temperature);
    so.top_k = field_int(L, opts, "top_k", so.top_k);
    so.seed = (uint64_t)field_int(L, opts, "seed", (int)so.seed);
    lua_getfield(L, opts, "eot");
    if (!lua_isnil(L, -1)) eot = (int)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
  }
  int32_t *out = NULL;
  int nout = 0;
  char err[512];
  int rc = lstrata_generate(u->model, prompt, (int)np, n, &so, eot, NULL, NULL, &out, &nout, err, sizeof err);
  if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
  lua_createtable(L, nout, 0);
  for (int i = 0; i < nout; i++) {
    lua_pushinteger(L, out[i]);
    lua_rawseti(L, -2, i + 1);
  }
  free(out);
  return 1;
}

/* m:forward(inputs, targets, B, T) -> loss | nil, message, code.
 * inputs/targets: strata.ints of B*T (targets may be nil: logits only). */
static int gpt_forward(lua_State *L) {
  lgpt_t *u = togpt(L, 1);
  lstrata_buf_t *in = lstrata_checkbuf(L, 2, 1);
  lstrata_buf_t *tg = lua_isnil(L, 3) ? NULL : lstrata_checkbuf(L, 3, 1);
  lua_Integer B = luaL_checkinteger(L, 4), T = luaL_checkinteger(L, 5);
  luaL_argcheck(L, B >= 1 && T >= 1 && B * T <= (lua_Integer)in->n, 4, "B*T exceeds the inputs");
  luaL_argcheck(L, !tg || B * T <= (lua_Integer)tg->n, 3, "B*T exceeds the targets");
  float loss = NAN;
  int rc = par_gpt_forward(u->model, in->p, tg ? tg->p : NULL, (int)B, (int)T, &loss);
  if (rc != STRATA_OK) return lstrata_fail(L, par_gpt_last_error(u->model), rc);
  lua_pushnumber(L, loss);
  return 1;
}

static int gpt_backward(lua_State *L) {
  lgpt_t *u = togpt(L, 1);
  int rc = par_gpt_backward(u->model);
  if (rc != STRATA_OK) return lstrata_fail(L, par_gpt_last_error(u->model), rc);
  lua_pushboolean(L, 1);
  return 1;
}

static int gpt_zero_grad(lua_State *L) {
  lgpt_t *u = togpt(L, 1);
  int rc = par_gpt_zero_grad(u->model);
  if (rc != STRATA_OK) return lstrata_fail(L, par_gpt_last_error(u->model), rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* m:params() / m:grads() -> strata.floats views (valid while m is open) */
static int gpt_params(lua_State *L) {
  lgpt_t *u = togpt(L, 1);
  size_t n = 0;
  float *p = par_gpt_params(u->model, &n);
  lstrata_newview(L, p, n, 1, (void **)&u->model);
  return 1;
}
static int gpt_grads(lua_State *L) {
  lgpt_t *u = togpt(L, 1);
  size_t n = 0;
  float *p = par_gpt_grads(u->model, &n);
  lstrata_newview(L, p, n, 1, (void **)&u->model);
  return 1;
}

/* m:views() -> {{name=, offset=, numel=, shape={...}, decay=}, ...}; offsets 0-based */
static int gpt_views(lua_State *L) {
  lgpt_t *u = togpt(L, 1);
  int n = par_gpt_num_views(u->model);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    const par_gpt_view_t *v = par_gpt_view(u->model, i);
    lua_createtable(L, 0, 5);
    lua_pushstring(L, v->name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, (lua_Integer)v->offset);
    lua_setfield(L, -2, "offset");
    lua_pushinteger(L, (lua_Integer)v->numel);
    lua_setfield(L, -2, "numel");
    lua_createtable(L, v->ndim, 0);
    for (int d = 0; d < v->ndim; d++) {
      lua_pushinteger(L, v->shape[d]);
      lua_seti(L, -2, d + 1);
    }
    lua_setfield(L, -2, "shape");
    lua_pushboolean(L, v->decay);
    lua_setfield(L, -2, "decay");
    lua_seti(L, -2, i + 1);
  }
  return 1;
}

static int gpt_config(lua_State *L) {
  lgpt_t *u = togpt(L, 1);
  const par_gpt_config_t *c = par_gpt_config(u->model);
  lua_pushfstring(L, "layers=%d hidden=%d heads=%d seq=%d vocab=%d", c->layers, c->hidden,
                  c->heads, c->seq, c->vocab);
  return 1;
}

/* m:memory() -> current bytes, peak bytes */
static int gpt_memory(lua_State *L) {
  lgpt_t *u = togpt(L, 1);
  size_t cur = 0, peak = 0;
  par_gpt_memory(u->model, &cur, &peak);
  lua_pushinteger(L, (lua_Integer)cur);
  lua_pushinteger(L, (lua_Integer)peak);
  return 2;
}

static int gpt_tostring(lua_State *L) {
  lgpt_t *u = luaL_checkudata(L, 1, GPT_MT);
  if (!u->model) lua_pushliteral(L, "strata.gpt (closed)");
  else lua_pushfstring(L, "strata.gpt (%I parameters)", (lua_Integer)par_gpt_param_count(par_gpt_config(u->model)));
  return 1;
}

/* ------------------------------------------------------------ optimizer */

typedef struct {
  optim *o;           /* NULL when closed */
  optim_tensor *t;    /* one per model view */
  int nt;
  float *m, *v;       /* state, owned */
  double *sq;
  size_t n;
} lopt_t;

static int opt_close(lua_State *L) {
  lopt_t *u = luaL_checkudata(L, 1, OPT_MT);
  optim_destroy(u->o);
  free(u->t);
  free(u->m);
  free(u->v);
  free(u->sq);
  u->o = NULL, u->t = NULL, u->m = u->v = NULL, u->sq = NULL, u->nt = 0;
  return 0;
}

static lopt_t *toopt(lua_State *L) {
  lopt_t *u = luaL_checkudata(L, 1, OPT_MT);
  if (!u->o) luaL_argerror(L, 1, "closed optimizer");
  lua_getiuservalue(L, 1, 1); /* the model must still be open */
  togpt(L, -1);
  lua_pop(L, 1);
  return u;
}

/* strata.optimizer{model=, name="adamw"|"sgd"|"momentum"|"nesterov"|"lamb"|"lars",
 *   lr=, weight_decay=, beta1=, beta2=, eps=, momentum=, warmup=, steps=,
 *   schedule="constant"|"cosine"|"linear", min_lr=}
 * Weight decay applies to matrices and embeddings only (the model's views). */
static int opt_new(lua_State *L) {
  static const char *const names[] = {"adamw", "sgd", "momentum", "nesterov", "lamb", "lars", NULL};
  static const char *const scheds[] = {"constant", "cosine", "linear", NULL};
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "model");
  lgpt_t *g = togpt(L, -1);
  int model_idx = lua_gettop(L);
  lua_getfield(L, 1, "name");
  int which = luaL_checkoption(L, -1, "adamw", names);
  lua_getfield(L, 1, "schedule");
  int sched = luaL_checkoption(L, -1, "constant", scheds);
  lua_pop(L, 2);
  lopt_t *u = lua_newuserdatauv(L, sizeof *u, 1);
  memset(u, 0, sizeof *u);
  luaL_setmetatable(L, OPT_MT);
  lua_pushvalue(L, model_idx);
  lua_setiuservalue(L, -2, 1);
  /* Defaults: the paper's values of each optimizer (optim_group_defaults). */
  optim_group d = optim_group_defaults(par_optim_kind(names[which]));
  par_optim_config_t c = {
      .name = names[which], .schedule = scheds[sched],
      .lr = field_num(L, 1, "lr", d.lr), .min_lr = field_num(L, 1, "min_lr", 0),
      .warmup = field_int(L, 1, "warmup", 0),
      .weight_decay = field_num(L, 1, "weight_decay", d.weight_decay),
      .beta1 = field_num(L, 1, "beta1", d.beta1), .beta2 = field_num(L, 1, "beta2", d.beta2),
      .eps = field_num(L, 1, "eps", d.eps),
      .momentum = field_num(L, 1, "momentum", which == 0 || which == 4 ? 0 : 0.9)};
  long steps = field_int(L, 1, "steps", 0);
  if (sched != 0 && steps <= c.warmup)
    return lstrata_fail(L, lua_pushfstring(L, "steps = %d must exceed warmup = %d for a %s schedule",
                                           (int)steps, (int)c.warmup, scheds[sched]),
                        STRATA_EINVAL);
  int groups[2];
  char err[512] = "";
  int rc = par_optim_create(&u->o, &c, steps > 0 ? steps : 1, lstrata_threads(NULL, NULL), groups,
                            err, sizeof err);
  if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
  float *params = par_gpt_params(g->model, &u->n);
  const float *grads = par_gpt_grads(g->model, NULL);
  int arrays = par_optim_state_arrays(&c);
  u->nt = par_gpt_num_views(g->model);
  if (((arrays & 1) && !(u->m = calloc(u->n, sizeof *u->m))) || ((arrays & 2) && !(u->v = calloc(u->n, sizeof *u->v))) ||
      !(u->t = calloc((size_t)u->nt, sizeof *u->t)) || !(u->sq = calloc((size_t)u->nt, sizeof *u->sq)))
    return luaL_error(L, "out of memory for the optimizer state");
  for (int i = 0; i < u->nt; i++) {
    const par_gpt_view_t *v = par_gpt_view(g->model, i);
    u->t[i] = (optim_tensor){.param = params + v->offset, .grad = grads + v->offset,
                             .m = u->m ? u->m + v->offset : NULL, .v = u->v ? u->v + v->offset : NULL,
                             .group = groups[v->decay ? 0 : 1], .n = v->numel};
  }
  return 1;
}

/* o:clip(max_norm) -> grad_scale, norm: the factor that clips the global
 * gradient norm to max_norm (0: no clipping), for o:step(scale). */
static int opt_clip(lua_State *L) {
  lopt_t *u = toopt(L);
  float max_norm = (float)luaL_optnumber(L, 2, 0);
  int rc = optim_grad_sumsq(u->o, u->sq, u->t, u->nt);
  if (rc != STRATA_OK) return lstrata_fail(L, optim_last_error(u->o), rc);
  double total = 0, norm = 0;
  for (int i = 0; i < u->nt; i++) total += u->sq[i];
  float scale = 1;
  optim_grad_scale(total, 1.0f, max_norm, &scale, &norm);
  lua_pushnumber(L, scale);
  lua_pushnumber(L, norm);
  return 2;
}

/* o:step([grad_scale]) -> true | nil, message, code */
static int opt_step(lua_State *L) {
  lopt_t *u = toopt(L);
  float scale = (float)luaL_optnumber(L, 2, 1.0);
  int rc = optim_step(u->o, u->t, u->nt, scale);
  if (rc != STRATA_OK) return lstrata_fail(L, optim_last_error(u->o), rc);
  lua_pushboolean(L, 1);
  return 1;
}

static int opt_lr(lua_State *L) {
  lopt_t *u = toopt(L);
  float lr = 0;
  optim_current_lr(u->o, 0, &lr);
  lua_pushnumber(L, lr);
  return 1;
}

/* o:step_count() / o:set_step_count(n): updates applied (for resumes) */
static int opt_get_step(lua_State *L) {
  lua_pushinteger(L, optim_get_step(toopt(L)->o));
  return 1;
}
static int opt_set_step(lua_State *L) {
  lopt_t *u = toopt(L);
  lua_Integer s = luaL_checkinteger(L, 2);
  luaL_argcheck(L, s >= 0, 2, "must be >= 0");
  optim_set_step(u->o, (long)s);
  return 0;
}

/* o:state() -> m, v (float views, nil when the optimizer keeps none) */
static int opt_state(lua_State *L) {
  lopt_t *u = toopt(L);
  if (u->m) lstrata_newview(L, u->m, u->n, 1, (void **)&u->o);
  else lua_pushnil(L);
  if (u->v) lstrata_newview(L, u->v, u->n, 1, (void **)&u->o);
  else lua_pushnil(L);
  return 2;
}

static int opt_tostring(lua_State *L) {
  lopt_t *u = luaL_checkudata(L, 1, OPT_MT);
  lua_pushstring(L, u->o ? "strata.optimizer" : "strata.optimizer (closed)");
  return 1;
}

/* strata.tp_layer{mode = "1d" | "2d" | "2.5d" | "3d", tp =, depth =, batch =,
 * seq =, hidden =, heads =, steps =, seed =}: one GPT transformer layer on
 * groups of tp consecutive ranks of the world (every rank calls it), `steps`
 * forwards and backwards; returns {sent, recv (bytes per rank per step, the
 * largest over the ranks), partners, formula (par_plan_tp_layer_sent),
 * papers (the products by the papers' formulas), seconds (per step, the
 * slowest rank), memory (bytes the layer holds per rank, the largest)}, or
 * nil and the message of a shape the mode cannot cut. With run = false:
 * {formula, papers} alone, at any tp, without running (no ranks needed). */
static int tp_layer(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  static const char *const modes[] = {"1d", "2d", "2.5d", "3d", NULL};
  lua_getfield(L, 1, "mode");
  par_tp_mode_t mode = (par_tp_mode_t)luaL_checkoption(L, -1, "1d", modes);
  lua_pop(L, 1);
  lua_getfield(L, 1, "run");
  int run = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_pop(L, 1);
  par_tplayer_config_t cfg = {.mode = mode, .depth = field_int(L, 1, "depth", 1), .batch = field_int(L, 1, "batch", 8),
                              .seq = field_int(L, 1, "seq", 64), .hidden = field_int(L, 1, "hidden", 256),
                              .heads = field_int(L, 1, "heads", 8), .seed = (uint64_t)field_int(L, 1, "seed", 1)};
  double rows = (double)cfg.batch * (double)cfg.seq;
  if (!run) { /* the formulas alone, at any tp */
    int tp = field_int(L, 1, "tp", 1);
    lua_createtable(L, 0, 2);
    lua_pushnumber(L, par_plan_tp_layer_sent(mode, tp, cfg.depth, rows, (double)cfg.hidden, 4));
    lua_setfield(L, -2, "formula");
    lua_pushnumber(L, par_plan_tp_layer_formula(mode, tp, cfg.depth, rows, (double)cfg.hidden, 4));
    lua_setfield(L, -2, "papers");
    return 1;
  }
  MPI_Comm world = lstrata_world(L);
  int size, rank;
  MPI_Comm_size(world, &size), MPI_Comm_rank(world, &rank);
  int tp = field_int(L, 1, "tp", size), steps = field_int(L, 1, "steps", 1);
  if (tp < 1 || size % tp)
    return lstrata_fail(L, lua_pushfstring(L, "tp = %d does not divide the %d ranks", tp, size), STRATA_EINVAL);
  if (steps < 1) return lstrata_fail(L, "steps must be at least 1", STRATA_EINVAL);
  char err[512] = "";
  comm_t *all = NULL, *group = NULL;
  tensor_ctx_t *tc = NULL;
  par_tplayer_t *layer = NULL;
  uint64_t sent = 0, recv = 0;
  double secs = 0;
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.threads = lstrata_threads(NULL, NULL);
  int rc = comm_from_mpi(&all, world, NULL);
  if (!rc) rc = comm_split(&group, all, rank / tp, rank);
  if (!rc) rc = tensor_ctx_create(&tc, &o);
  if (rc) snprintf(err, sizeof err, "tp_layer: cannot start its group or tensor context");
  else if ((rc = par_tplayer_create(&layer, group, tc, &cfg, err, sizeof err)) == STRATA_OK &&
           (rc = par_tplayer_run(layer, steps, &sent, &recv, &secs)) != STRATA_OK)
    snprintf(err, sizeof err, "%s", par_tplayer_error(layer));
  /* every rank learns whether any failed (the first message wins) */
  int bad = rc != STRATA_OK, anybad = 0;
  MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, world);
  double v[4] = {0, 0, secs / steps, 0}, mx[4];
  if (!anybad) {
    v[0] = (double)sent / steps, v[1] = (double)recv / steps;
    size_t cur, peak;
    tensor_memory(tc, TENSOR_CPU, &cur, &peak);
    v[3] = (double)peak;
  }
  MPI_Allreduce(v, mx, 4, MPI_DOUBLE, MPI_MAX, world);
  int partners = layer ? par_tplayer_partners(layer) : 0;
  par_tplayer_destroy(layer);
  tensor_ctx_destroy(tc);
  if (group) comm_destroy(group);
  if (all) comm_destroy(all);
  if (anybad) {
    if (!bad) snprintf(err, sizeof err, "tp_layer: another rank failed");
    return lstrata_fail(L, err, rc ? rc : STRATA_EINVAL);
  }
  lua_createtable(L, 0, 7);
  lua_pushnumber(L, mx[0]), lua_setfield(L, -2, "sent");
  lua_pushnumber(L, mx[1]), lua_setfield(L, -2, "recv");
  lua_pushinteger(L, partners), lua_setfield(L, -2, "partners");
  lua_pushnumber(L, par_plan_tp_layer_sent(mode, tp, cfg.depth, rows, (double)cfg.hidden, 4)), lua_setfield(L, -2, "formula");
  lua_pushnumber(L, par_plan_tp_layer_formula(mode, tp, cfg.depth, rows, (double)cfg.hidden, 4)), lua_setfield(L, -2, "papers");
  lua_pushnumber(L, mx[2]), lua_setfield(L, -2, "seconds");
  lua_pushnumber(L, mx[3]), lua_setfield(L, -2, "memory");
  return 1;
}

int luaopen_strata_model(lua_State *L) {
  static const luaL_Reg gm[] = {{"forward", gpt_forward}, {"backward", gpt_backward},
                                {"zero_grad", gpt_zero_grad}, {"params", gpt_params},
                                {"grads", gpt_grads}, {"views", gpt_views},
                                {"config", gpt_config}, {"memory", gpt_memory},
                                {"generate", gpt_generate},
                                {"close", gpt_close}, {NULL, NULL}};
  static const luaL_Reg om[] = {{"clip", opt_clip}, {"step", opt_step}, {"lr", opt_lr},
                                {"step_count", opt_get_step}, {"set_step_count", opt_set_step},
                                {"state", opt_state}, {"close", opt_close}, {NULL, NULL}};
  lstrata_newclass(L, GPT_MT, gm, gpt_close, gpt_tostring);
  lstrata_newclass(L, OPT_MT, om, opt_close, opt_tostring);
  static const luaL_Reg f[] = {{"gpt", gpt_new}, {"optimizer", opt_new}, {"model_config", model_config},
                               {"tp_layer", tp_layer}, {NULL, NULL}};
  luaL_newlib(L, f);
  return 1;
}
