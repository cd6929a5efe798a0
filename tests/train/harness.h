/* What the engine tests under tests/train share: CHECK, which counts a
 * failed check and prints it with the test's name, rank and line; an
 * engine or a Markov data set that ends the job with the reason when it
 * cannot be made (a setup error is no test result); the distance between
 * two trainings' parameters; the verdict over every rank. */
#ifndef STRATA_TESTS_TRAIN_HARNESS_H
#define STRATA_TESTS_TRAIN_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/parallel.h>

#include "gpt/tp_slice.h"

static const char *harness_name = "test";
static int rank, ranks, fails;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s np=%d rank %d line %d: ", harness_name, ranks, rank, __LINE__);          \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

static par_engine_t *make_engine(const par_gpt_config_t *mc, const par_layout_t *lay, const par_optim_config_t *oc,
                                 const par_engine_options_t *eo) {
  par_engine_t *e = NULL;
  char err[512];
  if (par_engine_create(&e, mc, lay, oc, eo, err, sizeof err)) {
    fprintf(stderr, "%s: %s\n", harness_name, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return e;
}

/* The default Markov corpus of 2^15 tokens in samples of seq. */
static par_data_t *markov_data(int seq) {
  par_data_options_t o = PAR_DATA_DEFAULTS;
  o.seq = seq, o.markov_tokens = 1 << 15;
  par_data_t *d = NULL;
  char err[512];
  if (par_data_open(&o, &d, err, sizeof err)) {
    fprintf(stderr, "%s: %s\n", harness_name, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return d;
}

/* Adds to sums[0] the squared distance between the parameters want and
 * got, and to sums[1] how far training moved want from start (n each): the
 * difference of two runs as a share of the move, sqrt(sums[0] / sums[1]). */
static inline void move_sums(const float *want, const float *got, const float *start, size_t n, double sums[2]) {
  for (size_t i = 0; i < n; i++) {
    double d = (double)want[i] - got[i], mv = (double)want[i] - start[i];
    sums[0] += d * d, sums[1] += mv * mv;
  }
}

/* The serial model's parameters (flat, whole) as tensor rank r of the
 * model m holds them (m's flat layout). */
static inline void slice_all(par_gpt_t *m, par_gpt_t *serial, const float *full, float *out, int r) {
  for (int i = 0; i < par_gpt_num_views(m); i++) {
    const par_gpt_view_t *v = par_gpt_view(m, i), *sv = par_gpt_view(serial, i);
    tp_slice_view(v, full + sv->offset, out + v->offset, r);
  }
}

static inline size_t local_count(par_gpt_t *m) {
  const par_gpt_view_t *v = par_gpt_view(m, par_gpt_num_views(m) - 1);
  return v->offset + v->numel;
}

/* Trains the serial engine s and engine e n steps side by side, each on
 * its data, keeping in *dl and *dg the largest relative differences of
 * their losses and gradient norms. A failed step is a failed check naming
 * `what`; returns 0, or -1 after one. */
static inline int side_by_side(par_engine_t *s, par_data_t *ds, par_engine_t *e, par_data_t *de, int n,
                               const char *what, double *dl, double *dg) {
  for (int k = 0; k < n; k++) {
    par_step_t a, b;
    if (par_engine_step(s, ds, &a) || par_engine_step(e, de, &b)) {
      CHECK(0, "%s: a step failed: %s / %s", what, par_engine_error(s), par_engine_error(e));
      return -1;
    }
    *dl = fmax(*dl, fabs(a.loss - b.loss) / a.loss);
    *dg = fmax(*dg, fabs(a.grad_norm - b.grad_norm) / a.grad_norm);
  }
  return 0;
}

/* A CPU engine c and a device engine g of one layout trained side by side
 * for n steps, each on its own Markov data of sequence seq (kept in *dc and
 * *dd for the caller, who destroys them): *dl and *dg as side_by_side's,
 * and the return the parameters' distance (every rank's part) as a share of
 * how far the CPU run moved them. */
static inline double cpu_device_pair(par_engine_t *c, par_engine_t *g, int seq, int n, const char *what, double *dl,
                                     double *dg, par_data_t **dc, par_data_t **dd) {
  size_t count = local_count(par_engine_model(c));
  *dc = markov_data(seq), *dd = markov_data(seq);
  float *p0 = malloc(count * 4), *pc = malloc(count * 4), *pg = malloc(count * 4);
  par_engine_get_params(c, p0);
  double sums[2] = {0, 0};
  *dl = *dg = 0;
  side_by_side(c, *dc, g, *dd, n, what, dl, dg);
  par_engine_get_params(c, pc), par_engine_get_params(g, pg);
  move_sums(pc, pg, p0, count, sums);
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  free(p0), free(pc), free(pg);
  return sqrt(sums[0] / sums[1]);
}

/* How far engine e's parameters (each rank's part) are from the serial
 * engine s's, as a share of how far s moved from p0 (its whole start), over
 * every rank (tr: the rank's place in a 1D tensor group). */
static inline double parts_apart(par_engine_t *s, par_engine_t *e, const float *p0, int tr) {
  par_gpt_t *sm = par_engine_model(s), *em = par_engine_model(e);
  size_t np = par_gpt_param_count(par_gpt_config(sm)), nl = local_count(em);
  float *ps = malloc(np * 4), *pe = malloc(nl * 4), *want = malloc(nl * 4), *w0 = malloc(nl * 4);
  par_engine_get_params(s, ps), par_engine_get_params(e, pe);
  slice_all(em, sm, ps, want, tr), slice_all(em, sm, p0, w0, tr);
  double sums[2] = {0, 0}; /* every rank's part counts: the move and the difference over the run */
  move_sums(want, pe, w0, nl, sums);
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  free(ps), free(pe), free(want), free(w0);
  return sqrt(sums[0] / sums[1]);
}

/* This machine's preset sized to the ranks, planning layout lay of model
 * mc with strata's engine parameters. */
static inline int plan_here(const par_gpt_config_t *mc, const par_layout_t *lay, par_plan_t *pl) {
  par_cluster_t cl;
  par_cluster_preset("this-machine", &cl, NULL, 0);
  cl.nodes = 1, cl.gpus_per_node = ranks;
  par_plan_params_t pp;
  par_plan_params_engine(&pp);
  return par_plan_estimate(mc, lay, &cl, &pp, pl);
}

/* Memory per rank of engine e (model mc, layout lay, on this machine's
 * ranks) against the planner with strata's engine parameters: the model
 * states exactly (each rank's part of every region, padded to the
 * data-parallel shards), the activations within 10%. `what` names the
 * layout in the messages. */
static inline void memory_vs_planner(par_engine_t *e, const par_gpt_config_t *mc, const par_layout_t *lay,
                                     const char *what) {
  par_engine_info_t in;
  par_engine_info(e, &in);
  par_plan_t pl;
  CHECK(plan_here(mc, lay, &pl) == 0, "planner: %s", pl.why);
  CHECK((double)in.state_bytes[0] == pl.mem[PAR_MEM_PARAMS] && (double)in.state_bytes[1] == pl.mem[PAR_MEM_GRADS] &&
            (double)in.state_bytes[2] == pl.mem[PAR_MEM_OPTIM],
        "%s: model states %zu + %zu + %zu bytes, planner %.0f + %.0f + %.0f", what, in.state_bytes[0],
        in.state_bytes[1], in.state_bytes[2], pl.mem[PAR_MEM_PARAMS], pl.mem[PAR_MEM_GRADS], pl.mem[PAR_MEM_OPTIM]);
  size_t cur = 0, peak = 0;
  par_engine_memory(e, &cur, &peak);
  double act = (double)peak - (double)(in.state_bytes[0] + in.state_bytes[1] + in.state_bytes[2]) - (double)in.buffer_peak;
  CHECK(fabs(pl.mem[PAR_MEM_ACTIV] / act - 1) <= 0.10, "%s: activations %.0f bytes, planner %.0f", what, act,
        pl.mem[PAR_MEM_ACTIV]);
  if (rank == 0)
    printf("%s: model states %zu + %zu + %zu bytes (planner equal), activations %.0f (planner %+.1f%%)\n", what,
           in.state_bytes[0], in.state_bytes[1], in.state_bytes[2], act, 100 * (pl.mem[PAR_MEM_ACTIV] / act - 1));
}

/* MPI started, the test's name set, and a new temporary folder shared by
 * the ranks in dir (n bytes), named after the test. */
static inline void harness_start(int *argc, char ***argv, const char *name, char *dir, size_t n) {
  MPI_Init(argc, argv);
  harness_name = name;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  snprintf(dir, n, "%s/strata_%s_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", name);
  if (rank == 0 && !mkdtemp(dir)) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(dir, (int)n, MPI_CHAR, 0, MPI_COMM_WORLD);
}

/* e loads the checkpoint at path (with data d) and then holds this tensor
 * rank's slice (of tp) of the parameters full of the serial model serial;
 * a step after it trains. what names e's layout in the failures. */
static inline void check_loaded(par_engine_t *e, par_data_t *d, const char *path, par_gpt_t *serial,
                                const float *full, int tp, const char *what) {
  size_t n = local_count(par_engine_model(e));
  float *mine = malloc(n * sizeof *mine), *want = malloc(n * sizeof *want);
  long step = 0;
  par_step_t st;
  CHECK(par_engine_load(e, path, d, &step) == 0, "load under %s: %s", what, par_engine_error(e));
  par_engine_get_params(e, mine);
  slice_all(par_engine_model(e), serial, full, want, rank % tp);
  CHECK(!memcmp(want, mine, n * sizeof *mine), "load under %s: not the saved model", what);
  CHECK(par_engine_step(e, d, &st) == 0 && isfinite(st.loss), "a step after loading under %s: %s", what,
        par_engine_error(e));
  free(mine), free(want);
}

/* The failed checks of every rank; rank 0 prints "NAME np=N: ok" or
 * FAILED (detail, when given, after the name). Ends MPI; the exit status. */
static int harness_finish(const char *detail) {
  int all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("%s np=%d%s%s: %s\n", harness_name, ranks, detail ? ", " : "", detail ? detail : "",
                        all ? "FAILED" : "ok");
  MPI_Finalize();
  return all ? 1 : 0;
}

/* main() of a multi-rank device test: with --cpu-as-device, cases(the CPU)
 * (a check of the test itself: every difference 0); with GPUs and an even
 * number of ranks >= 2, cases(this rank's node-local GPU; ranks may share
 * one, libcomm then stages their collectives through the host); without a
 * GPU, --cpu-checks runs without_gpu() (on an even number of ranks) and the
 * device run is skipped: exit 77, or 0 under --cpu-checks. The strings
 * describe the runs for harness_finish. */
static inline int device_test_main(int argc, char **argv, const char *name, void (*cases)(int),
                                   void (*without_gpu)(void), const char *without_what, const char *what) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  harness_name = name;
  int cpu_checks = argc > 1 && !strcmp(argv[1], "--cpu-checks");
  if (argc > 1 && !strcmp(argv[1], "--cpu-as-device")) {
    cases(PAR_DEVICE_CPU);
    return harness_finish("the device cases on the CPU");
  }
  int gpus = comm_cuda_device_count(), device = -1, local = 0;
  comm_local_device(MPI_COMM_WORLD, &device, &local);
  int have = gpus > 0;
  MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!have && cpu_checks && ranks % 2 == 0) {
    without_gpu();
    return harness_finish(without_what);
  }
  if (!have || ranks < 2 || ranks % 2) {
    if (rank == 0)
      printf("%s np=%d: skipped: needs an even number of ranks >= 2 under mpirun and a GPU (%d here on rank 0's "
             "node)\n", name, ranks, gpus);
    MPI_Finalize();
    return cpu_checks ? 0 : 77;
  }
  cases(device);
  return harness_finish(what);
}

#endif
