/* strata: the executable. Commands: run, plan, sample, eval, convert, info, plot, help.
 *
 * Exit statuses: 0 success, 1 a run failed, 2 the command line or the
 * recipe is wrong (unknown command, syntax error, schema violation), 3 the
 * run stopped on request (a signal) after saving a checkpoint; a rank
 * killed by signal N: 128 + N. How runs end: runctl.c. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>
#include <strata/parallel.h>

#include "strata_lua.h"

static const char *usage =
    "usage: strata <command> [arguments]\n"
    "\n"
    "  strata run [-n N [--hostfile FILE]] RECIPE.lua [key=value ...]\n"
    "      Runs a recipe. key=value pairs override the recipe's settings by\n"
    "      dotted path (train.steps=50 data.seed=3). Relative data paths in the\n"
    "      recipe are relative to its folder; on the command line, to the current one.\n"
    "      Outputs go to run_dir (default runs/NAME); over an earlier run there, add\n"
    "      train.resume=true (continue it) or overwrite=true (start again).\n"
    "      -n N starts N ranks with mpirun (--hostfile: over its machines); under\n"
    "      mpirun or srun, strata just runs. With the recipe's elastic settings a run\n"
    "      started with -n goes on after a rank fails, on the ranks left.\n"
    "  strata plan RECIPE.lua\n"
    "      Runs a recipe in plan mode: strata.experiment predicts memory per device, step\n"
    "      time, TFLOP/s and tokens/s instead of training (cluster: the recipe's\n"
    "      plan.cluster, else this machine); plan-only recipes call strata.plan,\n"
    "      strata.plan_search and strata.reproduce (recipes/reproduce/).\n"
    "  strata sample MODEL [PROMPT] [n=200 temperature=1 top_k=40 seed=1 tokenizer=FILE]\n"
    "      Writes text after PROMPT with the model (a strata checkpoint, an llm.c model\n"
    "      file or a Hugging Face model.safetensors), with a KV cache; the same seed gives\n"
    "      the same text, temperature=0 the most likely one.\n"
    "  strata eval MODEL DATA... [batch=8 seq=N tokenizer=FILE out=FILE.h5]\n"
    "      Loss, perplexity and bits per byte of the model on every window of the data;\n"
    "      one line, and an HDF5 file (default MODEL.eval.h5).\n"
    "  strata convert SRC DEST.{h5,bin,safetensors} [dtype=bf16]\n"
    "      Converts weights between strata checkpoints, llm.c model files and Hugging\n"
    "      Face safetensors (dtype=bf16: llm.c version 5).\n"
    "  strata info\n"
    "      Versions of MPI, HDF5, Lua, OpenBLAS, CUDA and NCCL; devices; threads.\n"
    "  strata plot METRICS.h5 [name ...] -o FILE.png\n"
    "      Plots metrics against step (default: loss and val_loss) with gnuplot, one\n"
    "      panel per unit; -o FILE.gp writes the gnuplot script (and data) instead.\n"
    "  strata help\n"
    "      This text.\n"
    "  strata --version\n"
    "      The version of strata.\n"
    "\n"
    "Recipes are Lua 5.4 scripts: local strata = require 'strata' ... see docs/recipes.md.\n"
    "Environment: STRATA_THREADS overrides threads per rank (default cores / ranks on the node);\n"
    "STRATA_DEBUG=1 adds Lua tracebacks to errors; STRATA_CUDA_ALLOC=direct allocates GPU memory\n"
    "with cudaMalloc/cudaFree per tensor instead of the caching allocator (default: cache);\n"
    "STRATA_ATTENTION=own|cudnn picks the GPU attention kernel with bf16 GEMMs (default cudnn\n"
    "where libcudnn.so.9 loads). STRATA_SIMULATE_NODES=1 runs a hostfile's machines on this one.\n"
    "\n"
    "Exit status: 0 done, 1 failed, 2 bad command line or recipe, 3 stopped by a signal\n"
    "(Ctrl-C, SIGTERM, SIGUSR1) after saving a checkpoint, 128+N killed by signal N.\n"
    "A first Ctrl-C finishes the step and saves; a second stops at once.\n";

/* World rank from the launcher's environment (before MPI starts). */
static int env_rank(void) {
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  if (!r) r = getenv("PMI_RANK");
  return r ? atoi(r) : 0;
}
static int env_size(void) {
  const char *s = getenv("OMPI_COMM_WORLD_SIZE");
  if (!s) s = getenv("PMI_SIZE");
  return s ? atoi(s) : 0;
}

/* Threads per rank: cores / ranks on this node, set before any OpenMP or
 * BLAS work (both runtimes are already loaded, so their API is used; the
 * environment is set too for any child process). */
static void set_threads(void) {
  int t = lstrata_threads(NULL, NULL);
  char v[16];
  snprintf(v, sizeof v, "%d", t);
  setenv("OMP_NUM_THREADS", v, 1);
  setenv("OPENBLAS_NUM_THREADS", v, 1);
  omp_set_num_threads(t);
  openblas_set_num_threads(t);
}

/* ------------------------------------------------------------------ run */

/* Error values: a table {message=, status=} raised by the schema (printed as
 * is, exit status 2), or anything else (a Lua runtime error). */
static int msgh(lua_State *L) {
  if (lua_istable(L, 1)) return 1;
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = luaL_tolstring(L, 1, NULL);
  const char *dbg = getenv("STRATA_DEBUG");
  if (dbg && *dbg && strcmp(dbg, "0") != 0) luaL_traceback(L, L, msg, 1);
  else lua_pushstring(L, msg);
  return 1;
}

/* Reports an error value; returns the exit status. */
static int report(lua_State *L, int rank, int size, int *same_out) {
  int status = STRATA_EXIT_FAIL, same = 0;
  const char *msg;
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "status");
    status = (int)luaL_optinteger(L, -1, STRATA_EXIT_FAIL);
    lua_getfield(L, -2, "same_on_all_ranks");
    same = lua_toboolean(L, -1);
    lua_getfield(L, -3, "message");
    msg = lua_tostring(L, -1);
    if (!msg) msg = "error";
  } else {
    msg = lua_tostring(L, -1);
    if (!msg) msg = "error (not a string)";
  }
  /* A rank other than 0 that was stopped and woken again (SIGSTOP, then
   * mpirun's SIGCONT as it ends the job another rank's report ended) sees
   * the others gone and would blame them: rank 0 has said what happened. */
  int quiet = rank != 0 && size > 1 && lstrata_was_continued();
  if ((!same || rank == 0) && !quiet) {
    if (size > 1 && !same) fprintf(stderr, "strata: [rank %d] %s\n", rank, msg);
    else fprintf(stderr, "strata: %s\n", msg);
    fflush(stderr);
  }
  /* An error of this rank alone (a watchdog's report of a hung peer, an
   * MPI error from a dead one) ends the job: an elastic run goes on on the
   * ranks left, as after a rank's death. */
  if (!same && size > 1 && status == STRATA_EXIT_FAIL && !quiet) {
    char what[1200];
    snprintf(what, sizeof what, "rank %d of %d: %s", rank, size, msg);
    char *hint = strstr(what, "; last complete checkpoint: ");
    if (!hint) hint = strstr(what, "; no checkpoint was written");
    if (hint) *hint = 0;
    lstrata_elastic_failure(what);
  }
  lstrata_status()->reported = 1; /* this rank's guard stays silent */
  *same_out = same;
  return status;
}

typedef struct {
  const char *recipe;
  char **overrides;
  int noverrides, plan;
} run_args_t;

static int run_recipe(void *arg);

static int cmd_run(const char *self, int argc, char **argv, int plan) {
  int np = 0, i = 0;
  const char *hostfile = NULL; /* mpirun's, for ranks on several machines */
  while (i < argc && (!strcmp(argv[i], "-n") || !strcmp(argv[i], "--hostfile"))) {
    if (!strcmp(argv[i], "--hostfile")) {
      if (i + 1 >= argc || access(argv[i + 1], R_OK) != 0) {
        fprintf(stderr, "strata run: --hostfile needs a readable file (mpirun's hostfile)%s%s\n",
                i + 1 < argc ? ": cannot read " : "", i + 1 < argc ? argv[i + 1] : "");
        return STRATA_EXIT_USAGE;
      }
      hostfile = argv[i + 1];
    } else if (i + 1 >= argc || (np = atoi(argv[i + 1])) < 1) {
      fprintf(stderr, "strata run: -n needs a positive number of ranks\n");
      return STRATA_EXIT_USAGE;
    }
    i += 2;
  }
  if (hostfile && np < 1) {
    fprintf(stderr, "strata run: --hostfile goes with -n N (the ranks to start over its machines)\n");
    return STRATA_EXIT_USAGE;
  }
  if (i >= argc) {
    fprintf(stderr, "strata run: no recipe given (usage: strata run [-n N [--hostfile FILE]] RECIPE.lua [key=value ...])\n");
    return STRATA_EXIT_USAGE;
  }
  const char *recipe = argv[i++];
  for (int k = i; k < argc; k++) {
    const char *eq = strchr(argv[k], '=');
    if (!eq || eq == argv[k]) {
      fprintf(stderr, "strata run: '%s' is not a key=value override (e.g. train.steps=50)\n",
              argv[k]);
      return STRATA_EXIT_USAGE;
    }
  }
  if (access(recipe, R_OK) != 0) {
    fprintf(stderr, "strata run: cannot read recipe '%s': %s\n", recipe, strerror(errno));
    return STRATA_EXIT_USAGE;
  }
  lstrata_set_command(self, argv + i - 1, argc - i + 1);
  lstrata_hosts_t hosts; /* the slots an elastic run may use */
  if (np > 0 && env_size() == 0) {
    char herr[600];
    if (lstrata_hosts_read(&hosts, hostfile, herr, sizeof herr) != 0) {
      fprintf(stderr, "%s\n", herr);
      return STRATA_EXIT_USAGE;
    }
    if (hosts.total && np > hosts.total) {
      char place[1024];
      lstrata_hosts_place(&hosts, hosts.total, place, sizeof place);
      fprintf(stderr, "strata run: -n %d is more than the %d slots of %s%s%s%s\n", np, hosts.total, hosts.source,
              place[0] ? " (" : "", place, place[0] ? ")" : "");
      return STRATA_EXIT_USAGE;
    }
  }
  if (np > 0 && env_size() == 0) {
    /* Start the ranks: mpirun -np N ... this executable run RECIPE ... */
    char **av = calloc((size_t)argc + 32, sizeof *av);
    char nps[16], exe[4096];
    int a = 0;
    ssize_t sl = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (!av || sl <= 0) {
      fprintf(stderr, "strata run: cannot find this executable to start it under mpirun\n");
      free(av);
      return STRATA_EXIT_FAIL;
    }
    exe[sl] = 0;
    snprintf(nps, sizeof nps, "%d", np);
    setenv("STRATA_LAUNCH_N", nps, 1); /* the ranks' resume command says -n N */
    setenv("STRATA_SELF", self, 1);
    av[a++] = "mpirun";
    av[a++] = "-np";
    av[a++] = nps;
    av[a++] = "--oversubscribe";
    av[a++] = "--quiet"; /* strata reports its own errors in one line */
    av[a++] = "--bind-to";
    av[a++] = "none";
    av[a++] = "--stdin"; /* mpirun runs in the background: the terminal is not its */
    av[a++] = "none";
    /* After a rank's failure mpirun ends the others with SIGTERM, then waits
     * this many seconds (default 1) before SIGKILL whether or not they have
     * ended. strata's ranks end at once on it (runctl.c, on_stop), so the
     * wait is only time an elastic relaunch loses. */
    av[a++] = "--mca";
    av[a++] = "odls_base_sigkill_timeout";
    av[a++] = "0";
    /* Over a hostfile's machines, or simulated ones (all ranks here, each
     * told its machine: hosts.c). A relaunch after a failure runs on the
     * machines left: a hostfile without the failed rank's slot. */
    char hosts_file[64], rank_nodes[8192], slots[16];
    snprintf(hosts_file, sizeof hosts_file, ".strata-hosts-%d", (int)getpid());
    int hostfile_at = -1;
    if (hostfile && !hosts.simulated) {
      av[a++] = "--hostfile";
      hostfile_at = a;
      av[a++] = (char *)hostfile;
      setenv("STRATA_LAUNCH_HOSTFILE", hostfile, 1); /* the ranks' resume command says it too */
    }
    if (hosts.total) {
      snprintf(slots, sizeof slots, "%d", hosts.total);
      setenv("STRATA_LAUNCH_SLOTS", slots, 1); /* elastic.max_ranks is checked against them */
      setenv("STRATA_LAUNCH_SLOTS_FROM", hosts.source, 1);
    }
    if (geteuid() == 0) av[a++] = "--allow-run-as-root";
    av[a++] = exe;
    av[a++] = plan ? "plan" : "run";
    for (int k = i - 1; k < argc; k++) av[a++] = argv[k];
    av[a] = NULL;
    /* Elastic runs (the recipe's elastic settings): the ranks record a
     * failure and the last checkpoint in this file, and the run goes on from
     * there on the ranks left, with the same global batch. */
    /* The file is in the current folder, which mpirun starts every rank in:
     * on several machines a shared file system, as the checkpoints need. */
    char efile[4200], cwd[4096], ckpt[4200], resume[4300], gbatch[64], bstart[64], restarted[16];
    if (!getcwd(cwd, sizeof cwd) || access(cwd, W_OK) != 0) snprintf(cwd, sizeof cwd, "/tmp");
    snprintf(efile, sizeof efile, "%s/.strata-elastic-%d", cwd, (int)getpid());
    setenv("STRATA_ELASTIC_FILE", efile, 1);
    int status = 0, tail = a, warm_done = 0;
    for (int restarts = 0;; restarts++) {
      unlink(efile);
      snprintf(restarted, sizeof restarted, "%d", restarts);
      setenv("STRATA_ELASTIC_RESTARTS", restarted, 1);
      if (hosts.simulated) {
        lstrata_hosts_rank_nodes(&hosts, np, rank_nodes, sizeof rank_nodes);
        setenv("STRATA_RANK_NODES", rank_nodes, 1);
      }
      status = lstrata_launch(av);
      long gb = 0;
      int next =
          plan ? 0 : lstrata_elastic_next(efile, status, np, restarts, warm_done, &hosts, ckpt, sizeof ckpt, &gb);
      if (next <= 0) break;
      if (hostfile_at >= 0 && next < np) { /* the machines left */
        if (lstrata_hosts_write(&hosts, hosts_file) != 0) {
          fprintf(stderr, "strata: elastic: cannot write %s: %s; not relaunching\n", hosts_file, strerror(errno));
          break;
        }
        av[hostfile_at] = hosts_file;
      }
      snprintf(slots, sizeof slots, "%d", hosts.total);
      if (hosts.total) setenv("STRATA_LAUNCH_SLOTS", slots, 1);
      if (next > np) warm_done = 1; /* grown: the warm-up is over, the batch the global batch from here on */
      int grown = warm_done;
      np = next;
      snprintf(nps, sizeof nps, "%d", np);
      setenv("STRATA_LAUNCH_N", nps, 1);
      /* the same recipe and settings, less those the relaunch sets */
      int w = tail - (argc - (i - 1));
      for (int k = i - 1; k < argc; k++)
        if (strncmp(argv[k], "train.resume=", 13) && strncmp(argv[k], "train.global_batch=", 19) &&
            strncmp(argv[k], "parallel.dp=", 12) && strncmp(argv[k], "overwrite=", 10) &&
            (!grown || strncmp(argv[k], "train.batch_start=", 18)))
          av[w++] = argv[k];
      snprintf(resume, sizeof resume, "train.resume=%s", ckpt);
      snprintf(gbatch, sizeof gbatch, "train.global_batch=%ld", gb);
      av[w++] = resume, av[w++] = gbatch, av[w++] = "parallel.dp=auto";
      if (grown) snprintf(bstart, sizeof bstart, "train.batch_start=%ld", gb), av[w++] = bstart;
      av[w] = NULL;
    }
    unlink(efile);
    if (hostfile_at >= 0) unlink(hosts_file);
    free(av);
    return status;
  }
  if (np > 0 && env_size() != np && env_rank() == 0)
    fprintf(stderr, "strata run: -n %d ignored: already running under mpirun with %d ranks\n", np,
            env_size());
  run_args_t ra = {recipe, argv + i, argc - i, plan};
  if (plan) return run_recipe(&ra);
  int size = env_size();
  return lstrata_guarded(run_recipe, &ra, env_rank(), size > 0 ? size : 1);
}

/* One rank's run of the recipe (under its guard for `run`). */
static int run_recipe(void *arg) {
  const run_args_t *ra = arg;
  const char *recipe = ra->recipe;
  int plan = ra->plan;
  set_threads();
  int rank = env_rank(), size = env_size();
  if (!plan) lstrata_catch_stop_signals(rank);
  lstrata_catch_fatal_ends();
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "strata: cannot create a Lua state\n");
    lstrata_status()->reported = 1;
    return STRATA_EXIT_FAIL;
  }
  luaL_openlibs(L);
  luaL_requiref(L, "strata", luaopen_strata, 0); /* also package.loaded.strata */
  /* The run's context for the runner: recipe path and overrides. */
  lua_pushstring(L, recipe);
  lua_setfield(L, -2, "recipe_path");
  lua_createtable(L, ra->noverrides, 0);
  for (int k = 0; k < ra->noverrides; k++) {
    lua_pushstring(L, ra->overrides[k]);
    lua_seti(L, -2, k + 1);
  }
  lua_setfield(L, -2, "overrides");
  if (plan) lplan_enter_plan_mode(L, lua_gettop(L));
  lua_pop(L, 1);
  /* Remove the global that luaL_requiref set: recipes `require "strata"`. */
  lua_pushnil(L);
  lua_setglobal(L, "strata");

  int status = STRATA_EXIT_OK, same = 1;
  lua_pushcfunction(L, msgh);
  int rc = luaL_loadfile(L, recipe);
  if (rc != LUA_OK) {
    if (rank == 0) fprintf(stderr, "strata: %s\n", lua_tostring(L, -1));
    lstrata_status()->reported = 1;
    status = STRATA_EXIT_USAGE;
  } else if (lua_pcall(L, 0, 0, 1) != LUA_OK) {
    status = report(L, rank, size, &same);
  } else {
    /* The runner validates overrides; a hand-written recipe that never
     * called strata.experiment must still not ignore them silently. */
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "strata");
    lua_getfield(L, -1, "check_overrides_used");
    if (lua_isfunction(L, -1) && lua_pcall(L, 0, 0, 1) != LUA_OK) status = report(L, rank, size, &same);
  }
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (status != STRATA_EXIT_OK && !same && init && !fin) {
    /* An error of this rank alone: the others may wait in a collective, so
     * end the job. Errors every rank raised (the schema, data, checkpoint
     * checks) end each rank cleanly instead. */
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    if (s > 1) {
      fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, status);
    }
  }
  lua_close(L);
  return status;
}

/* ------------------------------------------------------------------ plot */

static int cmd_plot(int argc, char **argv) {
  const char *in = NULL, *out = NULL;
  const char *names[64];
  int n = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "-o") == 0) {
      if (++i >= argc) {
        fprintf(stderr, "strata plot: -o needs a file name\n");
        return STRATA_EXIT_USAGE;
      }
      out = argv[i];
    } else if (!in) {
      in = argv[i];
    } else if (n < 64) {
      names[n++] = argv[i];
    }
  }
  if (!in || !out) {
    fprintf(stderr, "strata plot: usage: strata plot METRICS.h5 [name ...] -o FILE.png\n");
    return STRATA_EXIT_USAGE;
  }
  char err[600] = "";
  int status = lstrata_plot(in, names, n, out, err, sizeof err);
  if (status != STRATA_EXIT_OK) fprintf(stderr, "strata plot: %s\n", err);
  return status;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
  /* libtensor's OpenMP threads own the cores: idle ones must sleep, not
   * spin against the working ones (about 30% of a training step on a shared
   * machine). libgomp reads the policy once, before main, so set it and
   * start again; ranks started by `run -n` inherit it. */
  if (!getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);
  }
  if (argc < 2) {
    fputs(usage, stderr);
    return STRATA_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "help") || !strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
    fputs(usage, stdout);
    return STRATA_EXIT_OK;
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("strata %s\n", STRATA_VERSION);
    return STRATA_EXIT_OK;
  }
  if (!strcmp(cmd, "info")) {
    set_threads();
    lua_State *L = luaL_newstate();
    if (!L) return STRATA_EXIT_FAIL;
    lstrata_info(L);
    fputs(lua_tostring(L, -1), stdout);
    lua_close(L);
    return STRATA_EXIT_OK;
  }
  if (!strcmp(cmd, "run")) return cmd_run(argv[0], argc - 2, argv + 2, 0);
  if (!strcmp(cmd, "plan")) return cmd_run(argv[0], argc - 2, argv + 2, 1);
  if (!strcmp(cmd, "plot")) return cmd_plot(argc - 2, argv + 2);
  if (!strcmp(cmd, "sample") || !strcmp(cmd, "eval") || !strcmp(cmd, "convert")) {
    set_threads();
    if (!strcmp(cmd, "sample")) return lstrata_cmd_sample(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return lstrata_cmd_eval(argc - 2, argv + 2);
    return lstrata_cmd_convert(argc - 2, argv + 2);
  }
  fprintf(stderr, "strata: unknown command '%s' (commands: run, plan, sample, eval, convert, info, plot, help, version)\n", cmd);
  return STRATA_EXIT_USAGE;
}
