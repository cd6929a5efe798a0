/* BENCH train.quickstart.cpu: training tokens/s of the quickstart model
 * through the strata runner (recipes/quickstart.lua run by the embedded Lua
 * module, as `strata run` does) over the same data + forward + backward +
 * clip + AdamW step driven directly from C, both in this process, one rank.
 * Runs alternate (direct, runner, direct, runner, ...) and each side keeps
 * its best, so a neighbour's burst on a shared machine hurts both alike.
 * Goal (issue 5): ratio >= 0.95.
 *
 *   bench_train_quickstart [STEPS] [REPEATS]   (defaults 300, 3) */
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#include <strata/optim.h>
#include <strata/parallel.h>

#include "strata_lua.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The quickstart's settings (recipes/quickstart.lua), kept in step by hand. */
#define LAYERS 2
#define HIDDEN 64
#define HEADS 4
#define SEQ 64
#define BATCH 8

static double direct(int steps) {
  par_gpt_config_t mc = {.layers = LAYERS, .hidden = HIDDEN, .heads = HEADS, .seq = SEQ, .vocab = 256};
  par_data_options_t dopt = PAR_DATA_DEFAULTS;
  dopt.seq = SEQ, dopt.val_fraction = 0.05, dopt.markov_tokens = (size_t)1 << 22;
  par_data_t *d = NULL;
  par_gpt_t *m = NULL;
  optim *o = NULL;
  par_gpt_options_t go = PAR_GPT_OPTIONS_DEFAULTS;
  go.threads = lstrata_threads(NULL, NULL);
  optim_config oc = OPTIM_CONFIG_DEFAULTS;
  oc.threads = go.threads;
  if (par_data_open(&dopt, &d, NULL, 0) || par_gpt_create_ex(&m, &mc, &go, 1) ||
      optim_create(&o, &oc, NULL, 0)) {
    fprintf(stderr, "bench: setup failed\n");
    exit(1);
  }
  optim_group g = optim_group_defaults(OPTIM_ADAMW);
  g.lr = 1e-2f, g.weight_decay = 0, g.beta2 = 0.95f;
  optim_group nd = g;
  nd.adapt = 0;
  int g0, g1;
  optim_add_group(o, &g, &g0);
  optim_add_group(o, &nd, &g1);
  optim_schedule s = {OPTIM_SCHED_COSINE, 50, steps, 1.0, 0.1};
  optim_set_schedule(o, &s);
  size_t n;
  float *p = par_gpt_params(m, &n);
  const float *gr = par_gpt_grads(m, NULL);
  float *mm = calloc(n, 4), *vv = calloc(n, 4);
  int nt = par_gpt_num_views(m);
  optim_tensor *t = calloc((size_t)nt, sizeof *t);
  double *sq = calloc((size_t)nt, sizeof *sq);
  for (int i = 0; i < nt; i++) {
    const par_gpt_view_t *v = par_gpt_view(m, i);
    t[i] = (optim_tensor){.param = p + v->offset, .grad = gr + v->offset, .m = mm + v->offset,
                          .v = vv + v->offset, .group = v->decay ? g0 : g1, .n = v->numel};
  }
  int32_t in[BATCH * SEQ], tg[BATCH * SEQ];
  double t0 = now();
  for (int step = 0; step < steps; step++) {
    float loss, scale;
    double total = 0, norm;
    par_data_next(d, 0, 1, BATCH, in, tg);
    par_gpt_zero_grad(m);
    par_gpt_forward(m, in, tg, BATCH, SEQ, &loss);
    par_gpt_backward(m);
    optim_grad_sumsq(o, sq, t, nt);
    for (int i = 0; i < nt; i++) total += sq[i];
    optim_grad_scale(total, 1.0f, 1.0f, &scale, &norm);
    optim_step(o, t, nt, scale);
  }
  double tps = (double)steps * BATCH * SEQ / (now() - t0);
  free(t), free(sq), free(mm), free(vv);
  optim_destroy(o);
  par_gpt_destroy(m);
  par_data_destroy(d);
  return tps;
}

/* The runner's own figure: tokens over the wall time of its loop. */
static double runner(int steps, const char *dir) {
  char buf[7][128];
  snprintf(buf[0], sizeof buf[0], "train.steps=%d", steps);
  snprintf(buf[1], sizeof buf[1], "run_dir=%s", dir);
  const char *ov[] = {buf[0], buf[1], "train.eval_every=0", "train.eval_batches=1",
                      "checkpoint.every=0", "checkpoint.final=false", "metrics.plot=false",
                      "train.log_every=1000000000", "overwrite=true"}; /* every repeat in one folder */
  const int nov = (int)(sizeof ov / sizeof *ov);
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "strata", luaopen_strata, 0);
  lua_pushstring(L, "recipes/quickstart.lua");
  lua_setfield(L, -2, "recipe_path");
  lua_createtable(L, nov, 0);
  for (int i = 0; i < nov; i++) {
    lua_pushstring(L, ov[i]);
    lua_seti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "overrides");
  int out = dup(STDOUT_FILENO), null = open("/dev/null", O_WRONLY);
  fflush(stdout);
  dup2(null, STDOUT_FILENO); /* the runner's own report lines */
  int rc = luaL_dofile(L, "recipes/quickstart.lua");
  fflush(stdout);
  dup2(out, STDOUT_FILENO);
  close(out), close(null);
  double tps = NAN;
  if (rc != LUA_OK) {
    const char *msg = lua_type(L, -1) == LUA_TTABLE ? (lua_getfield(L, -1, "message"), lua_tostring(L, -1))
                                                    : lua_tostring(L, -1);
    fprintf(stderr, "bench: runner failed: %s\n", msg ? msg : "?");
    exit(1);
  }
  if (lua_getfield(L, -1, "last_run") == LUA_TTABLE && lua_getfield(L, -1, "tokens_per_s") == LUA_TNUMBER)
    tps = lua_tonumber(L, -1);
  lua_close(L);
  return tps;
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 300, reps = argc > 2 ? atoi(argv[2]) : 3;
  if (steps < 60 || reps < 1) {
    fprintf(stderr, "usage: bench_train_quickstart [STEPS >= 60] [REPEATS >= 1]\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int th = lstrata_threads(NULL, NULL);
  omp_set_num_threads(th);
  openblas_set_num_threads(th);
  char dir[] = "/tmp/strata-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  double best_d = 0, best_r = 0;
  for (int i = 0; i < reps; i++) {
    double d = direct(steps), r = runner(steps, dir);
    best_d = d > best_d ? d : best_d;
    best_r = r > best_r ? r : best_r;
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", dir);
  printf("BENCH train.quickstart.cpu value=%.0f unit=tokens/s baseline=%.0f ratio=%.3f\n", best_r,
         best_d, best_r / best_d);
  MPI_Finalize();
  return 0;
}
