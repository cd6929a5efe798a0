/* Internal header of the strata executable and its Lua module `strata`.
 *
 * The module follows liolib.c: every handle is a full userdata created in a
 * closed state before its resource is opened, with a named metatable
 * (luaL_newmetatable), one idempotent close shared by __gc and __close,
 * luaL_argerror for programming errors and `nil, message, code` for expected
 * failures (a missing file, a corrupt checkpoint). No globals: each
 * luaopen_strata_<lib> returns a table that luaopen_strata merges. */
#ifndef STRATA_LUA_H
#define STRATA_LUA_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <mpi.h>
#include <strata/parallel.h>
#include <signal.h>
#include <stddef.h>

/* Exit statuses of the executable. */
#define STRATA_EXIT_OK 0
#define STRATA_EXIT_FAIL 1  /* a run failed (data, I/O, numerics, Lua runtime error) */
#define STRATA_EXIT_USAGE 2 /* the command line or the recipe is wrong */
#define STRATA_EXIT_STOPPED 3 /* stopped on request (a signal), checkpoint saved: resume it */

/* ---- run control (runctl.c): the guard, stop signals, the launcher ---- */

/* What a rank's worker has reached, shared with its guard process. */
typedef struct {
  long step, steps;     /* the last step completed, the run's length (0: not training yet) */
  long ckpt_step;       /* the latest complete checkpoint (-1: none) */
  char ckpt_path[1024]; /* its path */
  int reported;         /* the worker printed its own error before exiting */
} lstrata_status_t;
/* Ends the rank on a call libparallel reports stuck (par_set_fatal_handler)
 * with one line naming the step, the last checkpoint and the resume command. */
void lstrata_catch_fatal_ends(void);
/* The page of this process (a private one when there is no guard). */
lstrata_status_t *lstrata_status(void);
/* Runs work(arg) in a worker process under a guard that reports a worker's
 * death nobody else reports (see runctl.c); returns the exit status, in
 * the guard and in the worker alike. */
int lstrata_guarded(int (*work)(void *), void *arg, int rank, int ranks);
/* Whether this process was stopped and woken again (SIGCONT) since the
 * stop-signal handlers were installed. */
int lstrata_was_continued(void);
/* Installs the stop-signal handlers of a run (rank 0 announces the stop). */
void lstrata_catch_stop_signals(int rank);
/* The flag the handlers set (the signal number; 0: none). */
volatile sig_atomic_t *lstrata_stop_flag(void);
/* `strata run -n N`: runs mpirun (argv av) in its own process group and
 * turns interrupts into a stop of every rank; returns mpirun's status. */
int lstrata_launch(char **av);
/* The machines of `strata run -n N` (hosts.c): a hostfile's or a Slurm
 * allocation's slots; none known (total 0): this machine, without limit. */
#define LSTRATA_MAX_HOSTS 256
typedef struct {
  struct {
    char name[256];
    int slots;
  } h[LSTRATA_MAX_HOSTS];
  int n;         /* machines named (0 under Slurm: the count alone) */
  int total;     /* slots in all; 0: unknown */
  int simulated; /* STRATA_SIMULATE_NODES=1: the hostfile's machines simulated on this one */
  char source[320]; /* "hostfile FILE", "the Slurm allocation (...)" */
} lstrata_hosts_t;
/* Reads the hostfile (NULL: the Slurm allocation, if any); -1 with a line in err. */
int lstrata_hosts_read(lstrata_hosts_t *hs, const char *hostfile, char *err, size_t errn);
/* Where np ranks sit, filling the slots in order: "node1 8, node2 4". */
void lstrata_hosts_place(const lstrata_hosts_t *hs, int np, char *out, size_t n);
/* The machines of ranks 0..np-1, separated by commas (STRATA_RANK_NODES). */
void lstrata_hosts_rank_nodes(const lstrata_hosts_t *hs, int np, char *out, size_t n);
/* The most of np ranks that share one machine, filling the slots in order. */
int lstrata_hosts_busiest(const lstrata_hosts_t *hs, int np);
/* A rank on `node` was lost: one slot fewer there; 1 if one was taken. */
int lstrata_hosts_drop(lstrata_hosts_t *hs, const char *node);
/* This rank's machine: its STRATA_RANK_NODES entry (simulated), else the host name. */
void lstrata_this_node(char *out, size_t n);
/* Simulated machines (STRATA_RANK_NODES): the id of this rank's, the first
 * rank named on it; -1 when not simulated. */
int lstrata_simulated_node(void);
/* Writes the machines with slots left as a hostfile; -1 on failure. */
int lstrata_hosts_write(const lstrata_hosts_t *hs, const char *path);
/* After a launch that ended with status_code: for an elastic run whose rank
 * failed or that stopped to grow (the ranks' records in `file`), the rank
 * count to relaunch on from the last checkpoint (its path into ckpt, the
 * run's global batch into *global_batch), with the reason on stderr; 0: no
 * relaunch (said why when an elastic run cannot go on). warm_done: a batch
 * warm-up is over (after a growth), so it no longer constrains the layout.
 * hs: the machines; a failed rank's slot leaves them. */
int lstrata_elastic_next(const char *file, int status_code, int np, int restarts, int warm_done,
                         lstrata_hosts_t *hs, char *ckpt, size_t ckpt_n, long *global_batch);
/* Records a failure of this rank (an error of its own) for the launcher. */
void lstrata_elastic_failure(const char *what);
/* Appends key=value lines to the elastic records (rank 0: what the launcher chooses with). */
void lstrata_elastic_append(const char *lines);
/* An elastic run that stopped to grow (rank 0): records the ranks to
 * relaunch on and the checkpoint just saved for the launcher. */
void lstrata_elastic_grow(int ranks);
/* Remembers how this run was started, for the resume command: the name
 * of the executable and the arguments after `run` (recipe, overrides). */
void lstrata_set_command(const char *self, char **args, int nargs);
/* The command that continues this run from checkpoint ckpt (NULL: the
 * command that starts it again), quoted for a shell. */
void lstrata_resume_command(char *buf, size_t n, const char *ckpt);
/* "last complete checkpoint: P (step N); resume with: CMD" from the status page. */
void lstrata_checkpoint_hint(char *buf, size_t n);

int luaopen_strata(lua_State *L);
int luaopen_strata_parallel(lua_State *L); /* data, metrics, checkpoint */
int luaopen_strata_core(lua_State *L);     /* floats buffers, MPI world, info */
int luaopen_strata_train(lua_State *L);    /* the training loop (GPT, optim, comm) */
int luaopen_strata_plan(lua_State *L);     /* the planner: plan, plan_search, reproduce */
/* `strata plan`: strata.experiment (module table at `module`) predicts instead of training. */
void lplan_enter_plan_mode(lua_State *L, int module);

/* Registers the metatable `name` of a handle type: methods, __gc = __close = close, __tostring. */
void lstrata_newclass(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction close,
                      lua_CFunction tostring);

/* Pushes `nil, msg, code` (liolib's convention for expected failures). */
int lstrata_fail(lua_State *L, const char *msg, int code);

/* MPI, started on first use by any binding that needs a communicator and
 * finalised when the Lua state closes. Returns MPI_COMM_WORLD. */
MPI_Comm lstrata_world(lua_State *L);

/* A flat fp32 or int32 buffer (userdata "strata.floats" / "strata.ints"),
 * either owning its memory or a view into memory another handle owns (a
 * model's parameters): a view keeps its owner alive (user value 1) and
 * checks *alive, the owner's handle pointer, before each use, so a view of
 * a closed model raises instead of touching freed memory. */
typedef struct {
  size_t n;
  int is_int;
  void *p;      /* float* or int32_t*; NULL once closed */
  void **alive; /* views: the owner's handle field (NULL when the owner closed); else NULL */
} lstrata_buf_t;
lstrata_buf_t *lstrata_checkbuf(lua_State *L, int idx, int want_int);
lstrata_buf_t *lstrata_newbuf(lua_State *L, size_t n, int is_int);
/* Pushes a float view of n elements at p owned by the userdata at owner_idx. */
lstrata_buf_t *lstrata_newview(lua_State *L, float *p, size_t n, int owner_idx, void **alive);
int luaopen_strata_model(lua_State *L); /* strata.gpt, strata.optimizer */

/* The embedded Lua sources (generated from the .lua files of lua/ by lua/embed.sh). */
typedef struct {
  const char *name, *src;
} lstrata_chunk_t;
extern const lstrata_chunk_t lstrata_chunks[];

/* `strata info` as text (versions, devices, threads) into a Lua string. */
int lstrata_info(lua_State *L);

/* Draws metrics `names` (n = 0: loss and val_loss) of the HDF5 file `in`
 * against step into the PNG `out` with gnuplot. Returns an exit status
 * (STRATA_EXIT_*); on failure err receives one line. */
int lstrata_plot(const char *in, const char *const *names, int n, const char *out, char *err,
                 size_t errlen);

/* ---- models in and out (lgen.c) ---- */
int lstrata_cmd_sample(int argc, char **argv);
int lstrata_cmd_eval(int argc, char **argv);
int lstrata_cmd_convert(int argc, char **argv);
/* A model built from the file's own configuration and weights (any of
 * strata's formats; MPI must be initialised for strata checkpoints). */
int lstrata_load_model(const char *path, par_gpt_t **out, par_model_format_t *fmt, char *err, size_t n);
/* Generates up to n tokens after prompt[0..np) (stopping at token eot, or
 * where the model's positions end): *out malloc'd, *nout of them; emit
 * (may be NULL) sees each as it comes. */
int lstrata_generate(par_gpt_t *m, const int32_t *prompt, int np, int n, const par_sample_options_t *so, int eot,
                     void (*emit)(void *, int32_t), void *ctx, int32_t **out, int *nout, char *err, size_t en);

/* This process's sgemm peak in FLOP/s with `threads` threads, from the
 * per-machine cache, measured (about 0.2 s) and cached when missing and
 * measure_if_missing; 0 when unknown. *measured (may be NULL): 1 when it
 * was measured now. (peak.c) */
double lstrata_gemm_peak(int threads, int measure_if_missing, int *measured);
/* CUDA device `device`'s bf16 GEMM peak in FLOP/s: libtensor's spec-sheet
 * table (tensor_cuda_table_peak), else cuBLAS measured (about a second)
 * and cached per device name when measure_if_missing; 0 when unknown.
 * desc[n] says which (the device's name, where the figure comes from). */
double lstrata_device_peak(int device, int measure_if_missing, char *desc, size_t n);
/* The sustained rate of n x n x n matrix multiplies through libtensor on
 * `device` (TENSOR_CPU: OpenBLAS sgemm blocks on this process's threads, as
 * strata's GPT runs them; a CUDA device: cuBLAS with `dt` inputs and fp32
 * accumulation): the best of a few timed runs after a warm-up. 0 and a
 * message in err on failure. (peak.c) */
double lstrata_measure_gemm(int device, tensor_dtype_t dt, int n, char *err, size_t en);

/* Threads for this process: cores / ranks on this node, or STRATA_THREADS. */
int lstrata_threads(int *cores, int *local_ranks);

#endif
