/* Lua bindings of libparallel's I/O: strata.data, strata.metrics,
 * strata.checkpoint (userdata "strata.data", "strata.metrics",
 * "strata.checkpoint"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <strata/parallel.h>

#include "strata_lua.h"

int lstrata_fail(lua_State *L, const char *msg, int code) {
  luaL_pushfail(L);
  lua_pushstring(L, msg);
  lua_pushinteger(L, code);
  return 3;
}

/* Optional fields of an options table. */
static lua_Integer opt_int(lua_State *L, int t, const char *k, lua_Integer def) {
  lua_Integer v = def;
  if (lua_getfield(L, t, k) != LUA_TNIL) {
    int ok;
    v = lua_tointegerx(L, -1, &ok);
    if (!ok) luaL_error(L, "option '%s' must be an integer", k);
  }
  lua_pop(L, 1);
  return v;
}
static lua_Number opt_num(lua_State *L, int t, const char *k, lua_Number def) {
  lua_Number v = def;
  if (lua_getfield(L, t, k) != LUA_TNIL) {
    int ok;
    v = lua_tonumberx(L, -1, &ok);
    if (!ok) luaL_error(L, "option '%s' must be a number", k);
  }
  lua_pop(L, 1);
  return v;
}
/* The string stays valid while the options table holds it. */
static const char *opt_str(lua_State *L, int t, const char *k, const char *def) {
  const char *v = def;
  if (lua_getfield(L, t, k) != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "option '%s' must be a string", k);
    v = lua_tostring(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

/* ------------------------------------------------------------------ data */

typedef struct {
  par_data_t *d;
  int seq;
} ldata_t;
#define DATA_MT "strata.data"

static ldata_t *todata(lua_State *L) {
  ldata_t *u = luaL_checkudata(L, 1, DATA_MT);
  if (!u->d) luaL_error(L, "attempt to use a closed data handle");
  return u;
}

static par_split_t checksplit(lua_State *L, int idx) {
  static const char *const names[] = {"train", "val", NULL};
  return (par_split_t)luaL_checkoption(L, idx, "train", names);
}

/* strata.data.open{source=, path=, val_path=, val_fraction=, seq=, seed=,
 *                  tokens=, fanout=, skew=, markov_seed=}
 * -> data | nil, message, code */
static int data_open(lua_State *L) {
  static const char *const fmts[] = {"markov", "text", "uint16", "uint32", "llmc", "auto", NULL};
  luaL_checktype(L, 1, LUA_TTABLE);
  ldata_t *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->d = NULL; /* closed until opened */
  luaL_setmetatable(L, DATA_MT);
  par_data_options_t o = PAR_DATA_DEFAULTS;
  lua_getfield(L, 1, "source");
  o.format = lua_isnil(L, -1) ? PAR_DATA_MARKOV
                              : (par_data_format_t)luaL_checkoption(L, lua_gettop(L), NULL, fmts);
  lua_pop(L, 1);
  o.path = opt_str(L, 1, "path", NULL);
  o.val_path = opt_str(L, 1, "val_path", NULL);
  o.val_fraction = opt_num(L, 1, "val_fraction", o.val_fraction);
  lua_Integer seq = opt_int(L, 1, "seq", o.seq);
  if (seq < 1 || seq > (1 << 24)) luaL_argerror(L, 1, "seq out of range");
  o.seq = (int)seq;
  o.seed = (uint64_t)opt_int(L, 1, "seed", (lua_Integer)o.seed);
  lua_Integer tokens = opt_int(L, 1, "tokens", (lua_Integer)o.markov_tokens);
  if (tokens < 0) luaL_argerror(L, 1, "tokens must be >= 0");
  o.markov_tokens = (size_t)tokens;
  lua_Integer fanout = opt_int(L, 1, "fanout", o.markov.fanout);
  o.markov.fanout = fanout < -1 || fanout > 100000 ? -1 : (int)fanout;
  o.markov.skew = opt_num(L, 1, "skew", o.markov.skew);
  o.markov.seed = (uint64_t)opt_int(L, 1, "markov_seed", (lua_Integer)o.markov.seed);
  char err[512] = "";
  int rc = par_data_open(&o, &u->d, err, sizeof err);
  if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
  u->seq = o.seq;
  return 1;
}

static int data_close(lua_State *L) {
  ldata_t *u = luaL_checkudata(L, 1, DATA_MT);
  par_data_destroy(u->d);
  u->d = NULL;
  return 0;
}

static int data_tostring(lua_State *L) {
  ldata_t *u = luaL_checkudata(L, 1, DATA_MT);
  if (!u->d) lua_pushliteral(L, "strata.data (closed)");
  else
    lua_pushfstring(L, "strata.data (%I train + %I val tokens, vocab %d)",
                    (lua_Integer)par_data_tokens(u->d, PAR_SPLIT_TRAIN),
                    (lua_Integer)par_data_tokens(u->d, PAR_SPLIT_VAL), par_data_vocab(u->d));
  return 1;
}

static int data_vocab(lua_State *L) {
  lua_pushinteger(L, par_data_vocab(todata(L)->d));
  return 1;
}

/* data:vocab_note(): a sentence when the vocabulary rests on a stray token, else nil. */
static int data_vocab_note(lua_State *L) {
  char buf[256];
  par_data_vocab_note(todata(L)->d, buf, sizeof buf);
  if (buf[0]) lua_pushstring(L, buf);
  else lua_pushnil(L);
  return 1;
}
static int data_seq(lua_State *L) {
  lua_pushinteger(L, todata(L)->seq);
  return 1;
}
/* Entropy rate in nats/token, or nil when the source does not know it. */
static int data_entropy(lua_State *L) {
  double h = par_data_entropy_rate(todata(L)->d);
  if (h < 0) lua_pushnil(L);
  else lua_pushnumber(L, h);
  return 1;
}
static int data_samples(lua_State *L) {
  ldata_t *u = todata(L);
  lua_pushinteger(L, (lua_Integer)par_data_samples(u->d, checksplit(L, 2)));
  return 1;
}
static int data_tokens(lua_State *L) {
  ldata_t *u = todata(L);
  lua_pushinteger(L, (lua_Integer)par_data_tokens(u->d, checksplit(L, 2)));
  return 1;
}
static int data_position(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)par_data_position(todata(L)->d));
  return 1;
}
static int data_set_position(lua_State *L) {
  ldata_t *u = todata(L);
  lua_Integer p = luaL_checkinteger(L, 2);
  luaL_argcheck(L, p >= 0, 2, "position must be >= 0");
  par_data_set_position(u->d, (uint64_t)p);
  return 0;
}

/* Output buffers: given strata.ints buffers (filled in place, returned), or
 * new ones of batch*seq elements. */
static void batch_bufs(lua_State *L, ldata_t *u, int batch, int at, lstrata_buf_t **in,
                       lstrata_buf_t **tg) {
  size_t n = (size_t)batch * (size_t)u->seq;
  if (lua_isnoneornil(L, at)) {
    *in = lstrata_newbuf(L, n, 1);
    *tg = lstrata_newbuf(L, n, 1);
  } else {
    *in = lstrata_checkbuf(L, at, 1);
    *tg = lstrata_checkbuf(L, at + 1, 1);
    luaL_argcheck(L, (*in)->n >= n, at, "inputs buffer too small for batch*seq");
    luaL_argcheck(L, (*tg)->n >= n, at + 1, "targets buffer too small for batch*seq");
    lua_pushvalue(L, at);
    lua_pushvalue(L, at + 1);
  }
}

/* data:batch(split, first, batch [, inputs, targets]) -> inputs, targets
 * (strata.ints of batch*seq, row-major [batch][seq]). */
static int data_batch(lua_State *L) {
  ldata_t *u = todata(L);
  par_split_t s = checksplit(L, 2);
  lua_Integer first = luaL_checkinteger(L, 3), batch = luaL_checkinteger(L, 4);
  luaL_argcheck(L, first >= 0, 3, "first sample must be >= 0");
  luaL_argcheck(L, batch >= 1 && batch <= (1 << 20), 4, "batch out of range");
  lstrata_buf_t *in, *tg;
  batch_bufs(L, u, (int)batch, 5, &in, &tg);
  int rc = par_data_fill(u->d, s, (uint64_t)first, (int)batch, in->p, tg->p);
  if (rc != STRATA_OK) return lstrata_fail(L, par_data_error(u->d), rc);
  return 2;
}

/* data:next(rank, ranks, batch [, inputs, targets]) -> inputs, targets */
static int data_next(lua_State *L) {
  ldata_t *u = todata(L);
  lua_Integer rank = luaL_checkinteger(L, 2), ranks = luaL_checkinteger(L, 3);
  lua_Integer batch = luaL_checkinteger(L, 4);
  luaL_argcheck(L, ranks >= 1 && ranks < (1 << 24), 3, "ranks out of range");
  luaL_argcheck(L, rank >= 0 && rank < ranks, 2, "rank out of range");
  luaL_argcheck(L, batch >= 1 && batch <= (1 << 20), 4, "batch out of range");
  lstrata_buf_t *in, *tg;
  batch_bufs(L, u, (int)batch, 5, &in, &tg);
  int rc = par_data_next(u->d, (int)rank, (int)ranks, (int)batch, in->p, tg->p);
  if (rc != STRATA_OK) return lstrata_fail(L, par_data_error(u->d), rc);
  return 2;
}

/* The handle itself, for C code of the runner (NULL when closed). */
par_data_t *lstrata_todata(lua_State *L, int idx) {
  ldata_t *u = luaL_checkudata(L, idx, DATA_MT);
  if (!u->d) luaL_argerror(L, idx, "closed data handle");
  return u->d;
}

static const luaL_Reg data_methods[] = {
    {"vocab", data_vocab},     {"vocab_note", data_vocab_note},     {"seq", data_seq},         {"entropy_rate", data_entropy},
    {"samples", data_samples}, {"tokens", data_tokens},   {"position", data_position},
    {"set_position", data_set_position}, {"batch", data_batch}, {"next", data_next},
    {"close", data_close},     {NULL, NULL}};

/* --------------------------------------------------------------- metrics */

typedef struct {
  par_metrics_t *m;
  int count;
  char **names;
} lmetrics_t;
#define METRICS_MT "strata.metrics"

static int metrics_close(lua_State *L) {
  lmetrics_t *u = luaL_checkudata(L, 1, METRICS_MT);
  par_metrics_destroy(u->m);
  u->m = NULL;
  for (int i = 0; i < u->count; i++) free(u->names[i]);
  free(u->names);
  u->names = NULL, u->count = 0;
  return 0;
}

static lmetrics_t *tometrics(lua_State *L) {
  lmetrics_t *u = luaL_checkudata(L, 1, METRICS_MT);
  if (!u->m) luaL_error(L, "attempt to use a closed metrics file");
  return u;
}

/* strata.metrics.create(path, {names...}) -> metrics | nil, message, code */
static int metrics_create(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 2);
  luaL_argcheck(L, n >= 1 && n <= 4096, 2, "between 1 and 4096 metric names");
  lmetrics_t *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->m = NULL, u->count = 0, u->names = NULL;
  luaL_setmetatable(L, METRICS_MT);
  if (!(u->names = calloc((size_t)n, sizeof *u->names))) return luaL_error(L, "out of memory");
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, 2, i);
    if (lua_type(L, -1) != LUA_TSTRING) luaL_argerror(L, 2, "metric names must be strings");
    if (!(u->names[i - 1] = strdup(lua_tostring(L, -1)))) return luaL_error(L, "out of memory");
    u->count = (int)i;
    lua_pop(L, 1);
  }
  char err[512] = "";
  int rc = par_metrics_create(path, (const char *const *)u->names, u->count, &u->m, err,
                              sizeof err);
  if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
  return 1;
}

/* m:append(row): row maps names to numbers (absent: NaN) or lists them in
 * the order of creation. -> true | nil, message, code */
static int metrics_append(lua_State *L) {
  lmetrics_t *u = tometrics(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  double *row = lua_newuserdatauv(L, (size_t)u->count * sizeof(double), 0);
  int positional = luaL_len(L, 2) > 0;
  for (int i = 0; i < u->count; i++) {
    int t = positional ? lua_geti(L, 2, i + 1) : lua_getfield(L, 2, u->names[i]);
    if (t == LUA_TNIL) row[i] = NAN;
    else if (t == LUA_TNUMBER) row[i] = lua_tonumber(L, -1);
    else return luaL_error(L, "metric '%s' must be a number, got %s", u->names[i],
                           luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  if (!positional) { /* a name not declared at creation is a programming error */
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      lua_pop(L, 1);
      int known = 0;
      if (lua_type(L, -1) == LUA_TSTRING)
        for (int i = 0; i < u->count && !known; i++) known = !strcmp(u->names[i], lua_tostring(L, -1));
      if (!known) {
        lua_pushvalue(L, -1);
        return luaL_error(L, "metrics: no metric named '%s' in this file", luaL_tolstring(L, -1, NULL));
      }
    }
  }
  int rc = par_metrics_append(u->m, row, 1);
  if (rc != STRATA_OK) return lstrata_fail(L, par_metrics_error(u->m), rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* m:attr(name, value): a string attribute (numbers are converted). */
static int metrics_attr(lua_State *L) {
  lmetrics_t *u = tometrics(L);
  const char *k = luaL_checkstring(L, 2), *v = luaL_checkstring(L, 3);
  int rc = par_metrics_set_attr(u->m, k, v);
  if (rc != STRATA_OK) return lstrata_fail(L, par_metrics_error(u->m), rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* m:unit(name, unit): the unit of a metric ("nats/token", "bytes", ...);
 * `strata plot` draws the metrics of one unit in one panel. */
static int metrics_unit(lua_State *L) {
  lmetrics_t *u = tometrics(L);
  int rc = par_metrics_set_unit(u->m, luaL_checkstring(L, 2), luaL_checkstring(L, 3));
  if (rc != STRATA_OK) return lstrata_fail(L, par_metrics_error(u->m), rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* strata.metrics.unit(path, name) -> unit | nil, message, code */
static int metrics_read_unit(lua_State *L) {
  char *unit = NULL, err[512] = "";
  int rc = par_metrics_read_unit(luaL_checkstring(L, 1), luaL_checkstring(L, 2), &unit, err, sizeof err);
  if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
  lua_pushstring(L, unit);
  free(unit);
  return 1;
}

/* strata.metrics.read(path, name) -> {values...} | nil, message, code */
static int metrics_read(lua_State *L) {
  const char *path = luaL_checkstring(L, 1), *name = luaL_checkstring(L, 2);
  double *v = NULL;
  size_t n = 0;
  char err[512] = "";
  int rc = par_metrics_read(path, name, &v, &n, err, sizeof err);
  if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
  lua_createtable(L, n > INT32_MAX ? INT32_MAX : (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_pushnumber(L, v[i]);
    lua_seti(L, -2, (lua_Integer)i + 1);
  }
  free(v);
  return 1;
}

/* strata.metrics.names(path) -> {names...} | nil, message, code */
static int metrics_names(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  char **names = NULL, err[512] = "";
  int n = 0;
  int rc = par_metrics_names(path, &names, &n, err, sizeof err);
  if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushstring(L, names[i]);
    lua_seti(L, -2, i + 1);
    free(names[i]);
  }
  free(names);
  return 1;
}

static int metrics_tostring(lua_State *L) {
  lmetrics_t *u = luaL_checkudata(L, 1, METRICS_MT);
  lua_pushfstring(L, "strata.metrics (%s)", u->m ? "open" : "closed");
  return 1;
}

static const luaL_Reg metrics_methods[] = {
    {"append", metrics_append}, {"attr", metrics_attr}, {"unit", metrics_unit}, {"close", metrics_close},
    {NULL, NULL}};

/* ------------------------------------------------------------ checkpoint */

typedef struct {
  par_ckpt_t *c;
} lckpt_t;
#define CKPT_MT "strata.checkpoint"

/* Closing abandons an uncommitted checkpoint; it is collective over the
 * world, so every rank must close (or collect) its handles in step. */
static int ckpt_close(lua_State *L) {
  lckpt_t *u = luaL_checkudata(L, 1, CKPT_MT);
  par_ckpt_close(u->c);
  u->c = NULL;
  return 0;
}

static lckpt_t *tockpt(lua_State *L) {
  lckpt_t *u = luaL_checkudata(L, 1, CKPT_MT);
  if (!u->c) luaL_error(L, "attempt to use a closed checkpoint");
  return u;
}

static int ckpt_new(lua_State *L, int writing) {
  const char *path = luaL_checkstring(L, 1);
  MPI_Comm world = lstrata_world(L);
  lckpt_t *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->c = NULL;
  luaL_setmetatable(L, CKPT_MT);
  char err[1024] = "";
  int rc = writing ? par_ckpt_create(path, world, 0, &u->c, err, sizeof err)
                   : par_ckpt_open(path, world, 0, &u->c, err, sizeof err);
  if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
  return 1;
}
/* strata.checkpoint.create(path) / .open(path): collective over all ranks. */
static int ckpt_create(lua_State *L) { return ckpt_new(L, 1); }
static int ckpt_open(lua_State *L) { return ckpt_new(L, 0); }

static int checkshape(lua_State *L, int idx, int64_t *shape) {
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_Integer nd = luaL_len(L, idx);
  luaL_argcheck(L, nd >= 1 && nd <= PAR_CKPT_MAX_DIMS, idx, "shape needs 1 to 4 dimensions");
  for (int i = 0; i < nd; i++) {
    lua_geti(L, idx, i + 1);
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    luaL_argcheck(L, ok && v >= 1, idx, "dimensions must be positive integers");
    shape[i] = v;
    lua_pop(L, 1);
  }
  return (int)nd;
}

/* ck:write(name, shape, offset, floats [, count]) / ck:read(...): this rank's
 * elements [offset, offset+count) of the flattened array (count defaults to
 * the buffer length). -> true | nil, message, code */
static int ckpt_io(lua_State *L, int writing) {
  lckpt_t *u = tockpt(L);
  const char *name = luaL_checkstring(L, 2);
  int64_t shape[PAR_CKPT_MAX_DIMS];
  int nd = checkshape(L, 3, shape);
  lua_Integer off = luaL_checkinteger(L, 4);
  lstrata_buf_t *b = lstrata_checkbuf(L, 5, 0);
  lua_Integer cnt = luaL_optinteger(L, 6, (lua_Integer)b->n);
  luaL_argcheck(L, cnt >= 0 && (size_t)cnt <= b->n, 6, "count exceeds the buffer");
  int rc = writing ? par_ckpt_write(u->c, name, nd, shape, off, cnt, b->p)
                   : par_ckpt_read(u->c, name, nd, shape, off, cnt, b->p);
  if (rc != STRATA_OK) return lstrata_fail(L, par_ckpt_error(u->c), rc);
  lua_pushboolean(L, 1);
  return 1;
}
static int ckpt_write(lua_State *L) { return ckpt_io(L, 1); }
static int ckpt_read(lua_State *L) { return ckpt_io(L, 0); }

/* ck:set(name, value): value a string, an integer or a list of integers. */
static int ckpt_set(lua_State *L) {
  lckpt_t *u = tockpt(L);
  const char *name = luaL_checkstring(L, 2);
  int rc;
  if (lua_type(L, 3) == LUA_TSTRING) {
    rc = par_ckpt_set_str(u->c, name, lua_tostring(L, 3));
  } else {
    int64_t v[64];
    int n = 0;
    if (lua_istable(L, 3)) {
      lua_Integer len = luaL_len(L, 3);
      luaL_argcheck(L, len >= 1 && len <= 64, 3, "1 to 64 integers");
      for (n = 0; n < len; n++) {
        lua_geti(L, 3, n + 1);
        int ok;
        v[n] = lua_tointegerx(L, -1, &ok);
        luaL_argcheck(L, ok, 3, "integers expected");
        lua_pop(L, 1);
      }
    } else {
      v[0] = luaL_checkinteger(L, 3);
      n = 1;
    }
    rc = par_ckpt_set_i64(u->c, name, v, n);
  }
  if (rc != STRATA_OK) return lstrata_fail(L, par_ckpt_error(u->c), rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* ck:get_string(name) -> string | nil, message, code */
static int ckpt_get_string(lua_State *L) {
  lckpt_t *u = tockpt(L);
  char *v = NULL;
  int rc = par_ckpt_get_str(u->c, luaL_checkstring(L, 2), &v);
  if (rc != STRATA_OK) return lstrata_fail(L, par_ckpt_error(u->c), rc);
  lua_pushstring(L, v);
  free(v);
  return 1;
}

/* ck:get_integers(name, n) -> {integers} | nil, message, code */
static int ckpt_get_integers(lua_State *L) {
  lckpt_t *u = tockpt(L);
  const char *name = luaL_checkstring(L, 2);
  lua_Integer n = luaL_optinteger(L, 3, 1);
  luaL_argcheck(L, n >= 1 && n <= 64, 3, "1 to 64 values");
  int64_t v[64];
  int rc = par_ckpt_get_i64(u->c, name, v, (int)n);
  if (rc != STRATA_OK) return lstrata_fail(L, par_ckpt_error(u->c), rc);
  lua_createtable(L, (int)n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushinteger(L, v[i]);
    lua_seti(L, -2, i + 1);
  }
  return 1;
}

/* ck:shape(name) -> {dims} | nil, message, code */
static int ckpt_shape(lua_State *L) {
  lckpt_t *u = tockpt(L);
  int nd = 0;
  int64_t s[PAR_CKPT_MAX_DIMS];
  int rc = par_ckpt_shape(u->c, luaL_checkstring(L, 2), &nd, s);
  if (rc != STRATA_OK) return lstrata_fail(L, par_ckpt_error(u->c), rc);
  lua_createtable(L, nd, 0);
  for (int i = 0; i < nd; i++) {
    lua_pushinteger(L, s[i]);
    lua_seti(L, -2, i + 1);
  }
  return 1;
}

/* ck:expect(name, string) -> true | nil, message naming both values, code */
static int ckpt_expect(lua_State *L) {
  lckpt_t *u = tockpt(L);
  int rc = par_ckpt_expect_str(u->c, luaL_checkstring(L, 2), luaL_checkstring(L, 3));
  if (rc != STRATA_OK) return lstrata_fail(L, par_ckpt_error(u->c), rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* ck:commit(): rename into place; the handle is closed afterwards. */
static int ckpt_commit(lua_State *L) {
  lckpt_t *u = tockpt(L);
  int rc = par_ckpt_commit(u->c);
  if (rc != STRATA_OK) {
    lua_pushstring(L, par_ckpt_error(u->c));
    par_ckpt_close(u->c);
    u->c = NULL;
    return lstrata_fail(L, lua_tostring(L, -1), rc);
  }
  par_ckpt_close(u->c);
  u->c = NULL;
  lua_pushboolean(L, 1);
  return 1;
}

static int ckpt_tostring(lua_State *L) {
  lckpt_t *u = luaL_checkudata(L, 1, CKPT_MT);
  lua_pushfstring(L, "strata.checkpoint (%s)", u->c ? "open" : "closed");
  return 1;
}

static const luaL_Reg ckpt_methods[] = {
    {"write", ckpt_write},   {"read", ckpt_read},           {"set", ckpt_set},
    {"get_string", ckpt_get_string}, {"get_integers", ckpt_get_integers},
    {"shape", ckpt_shape},   {"expect", ckpt_expect},       {"commit", ckpt_commit},
    {"close", ckpt_close},   {NULL, NULL}};

/* ---------------------------------------------------------------- module */

/* ------------------------------------------------------------ tokenizer */

#define TOK_MT "strata.tokenizer"

typedef struct {
  par_tokenizer_t *t; /* NULL when closed */
} ltok_t;

static ltok_t *totok(lua_State *L) {
  ltok_t *u = luaL_checkudata(L, 1, TOK_MT);
  if (!u->t) luaL_error(L, "attempt to use a closed tokenizer");
  return u;
}

/* strata.tokenizer(path) -> tokenizer | nil, message, code: llm.c's
 * gpt2_tokenizer.bin (decode) or GPT-2's vocab.json (+ merges.txt: encode) */
static int tok_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  ltok_t *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->t = NULL;
  luaL_setmetatable(L, TOK_MT);
  char err[512];
  int rc = par_tokenizer_open(path, &u->t, err, sizeof err);
  if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
  return 1;
}

static int tok_close(lua_State *L) {
  ltok_t *u = luaL_checkudata(L, 1, TOK_MT);
  par_tokenizer_destroy(u->t);
  u->t = NULL;
  return 0;
}

static int tok_tostring(lua_State *L) {
  ltok_t *u = luaL_checkudata(L, 1, TOK_MT);
  if (!u->t) lua_pushliteral(L, "strata.tokenizer (closed)");
  else lua_pushfstring(L, "strata.tokenizer (%d tokens%s)", par_tokenizer_vocab(u->t),
                       par_tokenizer_can_encode(u->t) ? "" : ", decode only");
  return 1;
}

/* t:encode(text) -> {ids...} | nil, message, code */
static int tok_encode(lua_State *L) {
  ltok_t *u = totok(L);
  size_t len;
  const char *text = luaL_checklstring(L, 2, &len);
  int32_t *ids;
  size_t n;
  char err[512];
  int rc = par_tokenizer_encode(u->t, text, len, &ids, &n, err, sizeof err);
  if (rc != STRATA_OK) return lstrata_fail(L, err, rc);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_pushinteger(L, ids[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  free(ids);
  return 1;
}

/* t:decode({ids...} | strata.ints) -> text */
static int tok_decode(lua_State *L) {
  ltok_t *u = totok(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t n = lua_istable(L, 2) ? lua_rawlen(L, 2) : lstrata_checkbuf(L, 2, 1)->n;
  for (size_t i = 0; i < n; i++) {
    int32_t id;
    if (lua_istable(L, 2)) {
      lua_rawgeti(L, 2, (lua_Integer)i + 1);
      id = (int32_t)luaL_checkinteger(L, -1);
      lua_pop(L, 1);
    } else {
      id = ((int32_t *)lstrata_checkbuf(L, 2, 1)->p)[i];
    }
    size_t l;
    const char *s = par_tokenizer_token(u->t, id, &l);
    if (s) luaL_addlstring(&b, s, l);
  }
  luaL_pushresult(&b);
  return 1;
}

static int tok_vocab(lua_State *L) {
  lua_pushinteger(L, par_tokenizer_vocab(totok(L)->t));
  return 1;
}

/* t:eot() -> the end-of-text token, or nil */
static int tok_eot(lua_State *L) {
  int e = par_tokenizer_eot(totok(L)->t);
  if (e < 0) lua_pushnil(L);
  else lua_pushinteger(L, e);
  return 1;
}

int luaopen_strata_parallel(lua_State *L) {
  static const luaL_Reg tok_methods[] = {{"encode", tok_encode}, {"decode", tok_decode}, {"vocab", tok_vocab},
                                         {"eot", tok_eot}, {"close", tok_close}, {NULL, NULL}};
  lstrata_newclass(L, TOK_MT, tok_methods, tok_close, tok_tostring);
  lstrata_newclass(L, DATA_MT, data_methods, data_close, data_tostring);
  lstrata_newclass(L, METRICS_MT, metrics_methods, metrics_close, metrics_tostring);
  lstrata_newclass(L, CKPT_MT, ckpt_methods, ckpt_close, ckpt_tostring);
  lua_newtable(L);
  luaL_Reg data_f[] = {{"open", data_open}, {NULL, NULL}};
  luaL_newlib(L, data_f);
  lua_setfield(L, -2, "data");
  luaL_Reg metrics_f[] = {
      {"create", metrics_create}, {"read", metrics_read}, {"names", metrics_names}, {"unit", metrics_read_unit},
      {NULL, NULL}};
  luaL_newlib(L, metrics_f);
  lua_setfield(L, -2, "metrics");
  luaL_Reg ckpt_f[] = {{"create", ckpt_create}, {"open", ckpt_open}, {NULL, NULL}};
  luaL_newlib(L, ckpt_f);
  lua_setfield(L, -2, "checkpoint");
  lua_pushcfunction(L, tok_open);
  lua_setfield(L, -2, "tokenizer");
  return 1;
}
