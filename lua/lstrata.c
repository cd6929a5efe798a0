/* The module `strata`: buffers, the MPI world, `info`, and the merge of
 * every luaopen_strata_<lib> plus the embedded Lua parts (schema, runner). */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>
#include <hdf5.h>
#include <strata/parallel.h>

#ifdef STRATA_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

#include "strata_lua.h"

#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif

/* ---------------------------------------------------------------- buffers */

#define FLOATS_MT "strata.floats"
#define INTS_MT "strata.ints"

lstrata_buf_t *lstrata_newbuf(lua_State *L, size_t n, int is_int) {
  lstrata_buf_t *b = lua_newuserdatauv(L, sizeof *b, 1);
  b->n = 0, b->is_int = is_int, b->p = NULL, b->alive = NULL;
  luaL_setmetatable(L, is_int ? INTS_MT : FLOATS_MT);
  if (n && !(b->p = calloc(n, 4))) luaL_error(L, "out of memory for %d elements", (int)n);
  b->n = n;
  return b;
}

lstrata_buf_t *lstrata_newview(lua_State *L, float *p, size_t n, int owner_idx, void **alive) {
  owner_idx = lua_absindex(L, owner_idx);
  lstrata_buf_t *b = lua_newuserdatauv(L, sizeof *b, 1);
  b->n = n, b->is_int = 0, b->p = p, b->alive = alive;
  luaL_setmetatable(L, FLOATS_MT);
  lua_pushvalue(L, owner_idx);
  lua_setiuservalue(L, -2, 1);
  return b;
}

static void checkalive(lua_State *L, lstrata_buf_t *b, int idx) {
  if (b->alive && !*b->alive) luaL_argerror(L, idx, "view of a closed handle");
}

lstrata_buf_t *lstrata_checkbuf(lua_State *L, int idx, int want_int) {
  lstrata_buf_t *b = luaL_checkudata(L, idx, want_int ? INTS_MT : FLOATS_MT);
  if (!b->p && b->n) luaL_argerror(L, idx, "closed buffer");
  checkalive(L, b, idx);
  return b;
}

static lstrata_buf_t *anybuf(lua_State *L, int idx) {
  lstrata_buf_t *b = luaL_testudata(L, idx, FLOATS_MT);
  if (!b) b = luaL_testudata(L, idx, INTS_MT);
  if (!b) luaL_typeerror(L, idx, "strata.floats or strata.ints");
  checkalive(L, b, idx);
  return b;
}

/* strata.floats(n | {values}) / strata.ints(n | {values}) */
static int buf_new(lua_State *L, int is_int) {
  if (lua_istable(L, 1)) {
    lua_Integer n = luaL_len(L, 1);
    lstrata_buf_t *b = lstrata_newbuf(L, (size_t)n, is_int);
    for (lua_Integer i = 0; i < n; i++) {
      lua_geti(L, 1, i + 1);
      if (is_int) ((int32_t *)b->p)[i] = (int32_t)luaL_checkinteger(L, -1);
      else ((float *)b->p)[i] = (float)luaL_checknumber(L, -1);
      lua_pop(L, 1);
    }
    return 1;
  }
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 0 && n <= ((lua_Integer)1 << 34), 1, "size out of range");
  lstrata_newbuf(L, (size_t)n, is_int);
  return 1;
}
static int floats_new(lua_State *L) { return buf_new(L, 0); }
static int ints_new(lua_State *L) { return buf_new(L, 1); }

static size_t checkindex(lua_State *L, lstrata_buf_t *b, int idx) {
  lua_Integer i = luaL_checkinteger(L, idx);
  luaL_argcheck(L, i >= 1 && (size_t)i <= b->n, idx, "index out of range");
  return (size_t)i - 1;
}
static int buf_index(lua_State *L) {
  lstrata_buf_t *b = anybuf(L, 1);
  if (lua_type(L, 2) == LUA_TNUMBER) {
    size_t i = checkindex(L, b, 2);
    if (b->is_int) lua_pushinteger(L, ((int32_t *)b->p)[i]);
    else lua_pushnumber(L, ((float *)b->p)[i]);
    return 1;
  }
  luaL_getmetafield(L, 1, "methods");
  lua_getfield(L, -1, luaL_checkstring(L, 2));
  return 1;
}
static int buf_newindex(lua_State *L) {
  lstrata_buf_t *b = anybuf(L, 1);
  size_t i = checkindex(L, b, 2);
  if (b->is_int) ((int32_t *)b->p)[i] = (int32_t)luaL_checkinteger(L, 3);
  else ((float *)b->p)[i] = (float)luaL_checknumber(L, 3);
  return 0;
}
static int buf_len(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)anybuf(L, 1)->n);
  return 1;
}
static int buf_close(lua_State *L) {
  lstrata_buf_t *b = luaL_testudata(L, 1, FLOATS_MT);
  if (!b) b = luaL_checkudata(L, 1, INTS_MT);
  if (!b->alive) free(b->p); /* a view owns nothing */
  b->p = NULL, b->n = 0, b->alive = NULL;
  return 0;
}
/* b:totable([first, last]) -> a Lua list of the values */
static int buf_totable(lua_State *L) {
  lstrata_buf_t *b = anybuf(L, 1);
  lua_Integer lo = luaL_optinteger(L, 2, 1), hi = luaL_optinteger(L, 3, (lua_Integer)b->n);
  luaL_argcheck(L, lo >= 1, 2, "out of range");
  luaL_argcheck(L, hi <= (lua_Integer)b->n, 3, "out of range");
  lua_createtable(L, hi >= lo ? (int)(hi - lo + 1) : 0, 0);
  for (lua_Integer i = lo; i <= hi; i++) {
    if (b->is_int) lua_pushinteger(L, ((int32_t *)b->p)[i - 1]);
    else lua_pushnumber(L, ((float *)b->p)[i - 1]);
    lua_seti(L, -2, i - lo + 1);
  }
  return 1;
}
/* b:fill(value) */
static int buf_fill(lua_State *L) {
  lstrata_buf_t *b = anybuf(L, 1);
  if (b->is_int) {
    int32_t v = (int32_t)luaL_checkinteger(L, 2);
    for (size_t i = 0; i < b->n; i++) ((int32_t *)b->p)[i] = v;
  } else {
    float v = (float)luaL_checknumber(L, 2);
    for (size_t i = 0; i < b->n; i++) ((float *)b->p)[i] = v;
  }
  lua_settop(L, 1);
  return 1;
}
static int buf_tostring(lua_State *L) {
  lstrata_buf_t *b = anybuf(L, 1);
  lua_pushfstring(L, "%s (%I elements)", b->is_int ? INTS_MT : FLOATS_MT, (lua_Integer)b->n);
  return 1;
}

static void bufclass(lua_State *L, const char *name) {
  static const luaL_Reg methods[] = {
      {"totable", buf_totable}, {"fill", buf_fill}, {"close", buf_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__index", buf_index}, {"__newindex", buf_newindex},
                                  {"__len", buf_len},     {"__gc", buf_close},
                                  {"__close", buf_close}, {"__tostring", buf_tostring},
                                  {NULL, NULL}};
  luaL_newmetatable(L, name);
  luaL_setfuncs(L, meta, 0);
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "methods");
  lua_pop(L, 1);
}

/* ------------------------------------------------------------- MPI world */

#define WORLD_KEY "strata.world"    /* registry: the MPI sentinel */
#define WORLD_MT "strata.world.mt" /* its metatable */

typedef struct {
  int started;  /* 1: strata called MPI_Init and finalises it */
  MPI_Comm run; /* the ranks ordered by node (libcomm's placement) */
} lworld_t;

static int world_gc(lua_State *L) {
  lworld_t *w = luaL_checkudata(L, 1, WORLD_MT);
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && w->run != MPI_COMM_NULL && w->run != MPI_COMM_WORLD) MPI_Comm_free(&w->run);
  if (w->started) {
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
    w->started = 0;
  }
  return 0;
}

/* The run's ranks ordered by node, then rank (comm_node_order), so that the
 * engine's groups of consecutive ranks (tensor parallelism) stay on a node
 * however mpirun mapped them; rank 0 stays first. The nodes are detected
 * (ranks sharing memory), or simulated: this rank's entry in
 * STRATA_RANK_NODES (hosts.c), a node's id being the first rank named on it. */
static MPI_Comm node_ordered(void) {
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) return MPI_COMM_WORLD;
  comm_config_t cfg = COMM_CONFIG_DEFAULTS;
  cfg.node_id = lstrata_simulated_node(); /* -1: detect */
  comm_t *c = NULL;
  MPI_Comm run = MPI_COMM_NULL;
  if (comm_from_mpi(&c, MPI_COMM_WORLD, &cfg) != STRATA_OK || comm_node_order(c, &run) != STRATA_OK)
    run = MPI_COMM_WORLD; /* (MPI's own errors abort the job first) */
  comm_destroy(c);
  return run;
}

MPI_Comm lstrata_world(lua_State *L) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, WORLD_KEY) == LUA_TNIL) {
    lua_pop(L, 1);
    int init = 0;
    MPI_Initialized(&init);
    lworld_t *w = lua_newuserdatauv(L, sizeof *w, 0);
    w->started = 0;
    w->run = MPI_COMM_NULL;
    if (luaL_newmetatable(L, WORLD_MT)) {
      lua_pushcfunction(L, world_gc);
      lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    if (!init) {
      int provided;
      if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        luaL_error(L, "MPI_Init failed");
      w->started = 1;
    }
    w->run = node_ordered();
    lua_setfield(L, LUA_REGISTRYINDEX, WORLD_KEY);
    return w->run;
  }
  MPI_Comm run = ((lworld_t *)lua_touserdata(L, -1))->run;
  lua_pop(L, 1);
  return run;
}

/* strata.world() -> rank, size (starts MPI when needed) */
static int l_world(lua_State *L) {
  MPI_Comm w = lstrata_world(L);
  int r, s;
  MPI_Comm_rank(w, &r);
  MPI_Comm_size(w, &s);
  lua_pushinteger(L, r);
  lua_pushinteger(L, s);
  return 2;
}

/* strata.barrier() */
static int l_barrier(lua_State *L) {
  MPI_Barrier(lstrata_world(L));
  return 0;
}

/* strata.allreduce(floats [, "sum"|"avg"|"max"|"min"]): in place over all
 * ranks (MPI directly; recipes that want libcomm's counters use strata.comm). */
static int l_allreduce(lua_State *L) {
  static const char *const ops[] = {"sum", "avg", "max", "min", NULL};
  lstrata_buf_t *b = lstrata_checkbuf(L, 1, 0);
  int op = luaL_checkoption(L, 2, "sum", ops);
  MPI_Comm w = lstrata_world(L);
  if (b->n > (size_t)INT32_MAX) return luaL_argerror(L, 1, "buffer too large");
  MPI_Op mop = op == 2 ? MPI_MAX : op == 3 ? MPI_MIN : MPI_SUM;
  if (MPI_Allreduce(MPI_IN_PLACE, b->p, (int)b->n, MPI_FLOAT, mop, w) != MPI_SUCCESS)
    return lstrata_fail(L, "MPI_Allreduce failed", STRATA_EMPI);
  if (op == 1) {
    int s;
    MPI_Comm_size(w, &s);
    for (size_t i = 0; i < b->n; i++) ((float *)b->p)[i] /= (float)s;
  }
  lua_settop(L, 1);
  return 1;
}

/* ---------------------------------------------------------------- threads */

int lstrata_threads(int *cores, int *local_ranks) {
  long c = sysconf(_SC_NPROCESSORS_ONLN);
  const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!ls) ls = getenv("MPI_LOCALNRANKS");
  int local = ls ? atoi(ls) : 1;
  if (local < 1) local = 1;
  if (c < 1) c = 1;
  if (cores) *cores = (int)c;
  if (local_ranks) *local_ranks = local;
  const char *forced = getenv("STRATA_THREADS");
  if (forced && atoi(forced) > 0) return atoi(forced);
  int t = (int)c / local;
  return t < 1 ? 1 : t;
}

/* ------------------------------------------------------------------- info */

int lstrata_info(lua_State *L) {
  luaL_Buffer b;
  char line[512];
  luaL_buffinit(L, &b);
  snprintf(line, sizeof line, "strata %s\n", STRATA_VERSION);
  luaL_addstring(&b, line);
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0, v = 0, sv = 0;
  MPI_Get_library_version(mpi, &len);
  MPI_Get_version(&v, &sv);
  char *nl = strchr(mpi, '\n');
  if (nl) *nl = 0;
  nl = strchr(mpi, ',');
  if (nl) *nl = 0;
  snprintf(line, sizeof line, "MPI       %s (standard %d.%d)\n", mpi, v, sv);
  luaL_addstring(&b, line);
  unsigned maj, min, rel;
  H5get_libversion(&maj, &min, &rel);
  int par = 0;
#ifdef H5_HAVE_PARALLEL
  par = 1;
#endif
  snprintf(line, sizeof line, "HDF5      %u.%u.%u%s\n", maj, min, rel, par ? " (parallel)" : "");
  luaL_addstring(&b, line);
  snprintf(line, sizeof line, "Lua       %s\n", LUA_RELEASE);
  luaL_addstring(&b, line);
  snprintf(line, sizeof line, "OpenBLAS  %s\n", openblas_get_config());
  luaL_addstring(&b, line);
#ifdef STRATA_CUDA
  int rt = 0, drv = 0, ndev = 0, nccl = 0;
  cudaRuntimeGetVersion(&rt);
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
  ncclGetVersion(&nccl);
  snprintf(line, sizeof line, "CUDA      runtime %d.%d, driver %s\n", rt / 1000, (rt % 1000) / 10,
           drv ? "present" : "absent");
  luaL_addstring(&b, line);
  snprintf(line, sizeof line, "NCCL      %d.%d.%d\n", nccl / 10000, (nccl / 100) % 100,
           nccl % 100);
  luaL_addstring(&b, line);
  for (int d = 0; d < ndev; d++) {
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    snprintf(line, sizeof line, "device    cuda:%d %s, %.1f GiB, sm_%d%d\n", d, p.name,
             (double)p.totalGlobalMem / (1 << 30), p.major, p.minor);
    luaL_addstring(&b, line);
  }
  if (ndev == 0) luaL_addstring(&b, "device    cpu (no CUDA device found)\n");
#else
  luaL_addstring(&b, "CUDA      not in this build\nNCCL      not in this build\n");
  luaL_addstring(&b, "device    cpu\n");
#endif
  int cores, local;
  int t = lstrata_threads(&cores, &local);
  snprintf(line, sizeof line,
           "threads   %d per rank (%d cores / %d ranks on this node; OpenMP max %d, OpenBLAS %d)\n",
           t, cores, local, omp_get_max_threads(), openblas_get_num_threads());
  luaL_addstring(&b, line);
  luaL_pushresult(&b);
  return 1;
}

static int l_info(lua_State *L) { return lstrata_info(L); }

/* ----------------------------------------------------------------- module */

int luaopen_strata_core(lua_State *L) {
  bufclass(L, FLOATS_MT);
  bufclass(L, INTS_MT);
  static const luaL_Reg f[] = {{"floats", floats_new}, {"ints", ints_new},
                               {"world", l_world},     {"barrier", l_barrier},
                               {"allreduce", l_allreduce}, {"info", l_info},
                               {NULL, NULL}};
  luaL_newlib(L, f);
  lua_pushstring(L, STRATA_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}

/* Copies every field of the table on top into the table at idx, pops it. */
static void merge(lua_State *L, int idx) {
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_settable(L, idx);
  }
  lua_pop(L, 1);
}

/* A handle type in the liolib.c manner: methods in __index, one idempotent
 * close shared by __gc and __close, and __tostring. */
void lstrata_newclass(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction close,
                      lua_CFunction tostring) {
  luaL_newmetatable(L, name);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, close);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, close);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
}

/* The module: C parts first, then the embedded Lua chunks in order, each
 * called with the module table and free to add fields to it. */
int luaopen_strata(lua_State *L) {
  lua_newtable(L);
  int m = lua_gettop(L);
  luaL_requiref(L, "strata.core", luaopen_strata_core, 0);
  merge(L, m);
  luaL_requiref(L, "strata.parallel", luaopen_strata_parallel, 0);
  merge(L, m);
  luaL_requiref(L, "strata.train", luaopen_strata_train, 0);
  merge(L, m);
  luaL_requiref(L, "strata.model", luaopen_strata_model, 0);
  merge(L, m);
  luaL_requiref(L, "strata.plan", luaopen_strata_plan, 0);
  merge(L, m);
  for (const lstrata_chunk_t *c = lstrata_chunks; c->name; c++) {
    char chunkname[64];
    snprintf(chunkname, sizeof chunkname, "=[strata %s]", c->name);
    if (luaL_loadbuffer(L, c->src, strlen(c->src), chunkname) != LUA_OK) return lua_error(L);
    lua_pushvalue(L, m);
    lua_call(L, 1, 0);
  }
  return 1;
}
