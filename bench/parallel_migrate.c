/* An elastic run growing from 2 to 4 data-parallel ranks (mpirun -np 2),
 * its state moved in memory against through a checkpoint, in the same run:
 *
 *   BENCH elastic.migrate   seconds from the old ranks' decision to grow to
 *                           the new engine holding the state on 4 ranks over
 *                           libcomm: start 2 processes and merge with them
 *                           (comm_spawn), create the engine, move the state
 *                           (par_engine_migrate); baseline: the checkpoint's
 *                           seconds, save on the 2 old ranks + create the
 *                           engine on the 4 + load there. Ratio < 1: the
 *                           migration is faster. The checkpoint side leaves
 *                           out the relaunch of the job that it needs
 *                           besides (mpirun, MPI_Init, reading the data),
 *                           and reads a file the page cache still holds.
 *   BENCH elastic.migrate.zero3   the same under ZeRO-3 (each rank a shard).
 *
 * The model: 12.8 M parameters (4 layers, hidden 512), AdamW: parameters,
 * m and v are 154 MB in all, every rank's whole copy of them under ZeRO-0.
 * The parts' seconds go to stderr (the checkpoint side's create is the
 * same engine on the same ranks as the migration's). Each measurement repeats (default 3,
 * new processes each time) and keeps its best.
 *
 *   bench_parallel_migrate [REPEATS] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/parallel.h>

#include "bench_engine.h"

static par_gpt_config_t mc = {.layers = 4, .hidden = 512, .heads = 8, .seq = 64, .vocab = 256};

static par_layout_t layout(int dp, int zero) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = dp, lay.zero_stage = zero, lay.microbatch = 1, lay.global_batch = dp;
  return lay;
}
static par_engine_options_t options(MPI_Comm comm) {
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 100, eo.threads = 1, eo.comm = comm, eo.collective_timeout_s = 300;
  return eo;
}

/* Seconds of each part, on the grown ranks' rank 0. */
enum { T_SPAWN, T_MIGRATE, T_SAVE, T_CREATE, T_LOAD, NT };
static const char *const part_names[NT] = {"spawn+merge", "create+move", "save", "create", "load"};

static void check(int rc, const char *what, const char *msg) {
  if (rc == STRATA_OK) return;
  fprintf(stderr, "%s: %s: %s\n", bench_name, what, msg);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* On every rank of grown (old: NULL on the new ranks): the migration, then
 * the checkpoint's way, from path (saved by the old ranks meanwhile). */
static void grown_part(MPI_Comm grown, par_engine_t *old, par_data_t *dold, int zero, const char *path, double *t) {
  par_layout_t lay = layout(4, zero);
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  par_engine_options_t eo = options(MPI_COMM_NULL);
  par_data_t *d = dold ? dold : bench_data(mc.seq);
  par_engine_t *e = NULL;
  long step = 1;
  char err[1024];
  double t0 = bench_now();
  check(par_engine_migrate(old, grown, &mc, &lay, &oc, &eo, d, &step, &e, err, sizeof err), "migrate", err);
  t[T_MIGRATE] = bench_now() - t0;
  par_engine_destroy(e); /* (two engines of 4 ranks at once would not add to the figures) */
  MPI_Barrier(grown);
  t0 = bench_now();
  if (old) { /* the old ranks save; the new ones wait, as a relaunched run waits for the file */
    check(par_engine_save(old, path, dold, step, NULL, 0), "save", par_engine_error(old));
  }
  MPI_Barrier(grown);
  t[T_SAVE] = bench_now() - t0;
  t0 = bench_now();
  eo.comm = grown;
  e = bench_engine(&mc, &lay, &eo);
  t[T_CREATE] = bench_now() - t0;
  t0 = bench_now();
  par_data_t *dl = bench_data(mc.seq);
  check(par_engine_load(e, path, dl, &step), "load", par_engine_error(e));
  t[T_LOAD] = bench_now() - t0;
  par_data_destroy(dl);
  par_engine_destroy(e);
  if (!dold) par_data_destroy(d);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm grown;
  char err[1024];
  check(comm_spawned(&grown, err, sizeof err), "comm_spawned", err);
  if (grown != MPI_COMM_NULL) { /* a new rank: argv[1] the ZeRO stage, argv[2] the checkpoint */
    bench_name = "bench_parallel_migrate (new rank)";
    double t[NT];
    grown_part(grown, NULL, NULL, atoi(argv[1]), argv[2], t);
    MPI_Comm_free(&grown);
    MPI_Finalize();
    return 0;
  }
  int rank, ranks;
  bench_name = "bench_parallel_migrate";
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != 2) {
    if (rank == 0) fprintf(stderr, "%s: run with mpirun -np 2\n", bench_name);
    MPI_Finalize();
    return 1;
  }
  int repeats = argc > 1 ? atoi(argv[1]) : 3;
  char self[4096], dir[512], path[600];
  if (!realpath(argv[0], self)) MPI_Abort(MPI_COMM_WORLD, 1);
  snprintf(dir, sizeof dir, "%s/strata_bench_migrate_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (rank == 0 && !mkdtemp(dir)) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  snprintf(path, sizeof path, "%s/grow.h5", dir);
  static const int zeros[2] = {0, 3};
  for (int z = 0; z < 2; z++) {
    par_layout_t lay = layout(2, zeros[z]);
    par_engine_options_t eo = options(MPI_COMM_WORLD);
    par_engine_t *old = bench_engine(&mc, &lay, &eo);
    par_data_t *d = bench_data(mc.seq);
    par_step_t st;
    check(par_engine_step(old, d, &st), "step", par_engine_error(old)); /* m and v filled */
    double best[NT], mig = INFINITY, ckpt = INFINITY;
    for (int k = 0; k < NT; k++) best[k] = INFINITY;
    for (int r = 0; r < repeats; r++) {
      double t[NT];
      char zs[8];
      snprintf(zs, sizeof zs, "%d", zeros[z]);
      char *args[] = {zs, path, NULL};
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = bench_now();
      check(comm_spawn(MPI_COMM_WORLD, 2, self, args, MPI_INFO_NULL, &grown, err, sizeof err), "comm_spawn", err);
      t[T_SPAWN] = bench_now() - t0;
      grown_part(grown, old, d, zeros[z], path, t);
      MPI_Comm_free(&grown);
      MPI_Bcast(t, NT, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      for (int k = 0; k < NT; k++) best[k] = fmin(best[k], t[k]);
      mig = fmin(mig, t[T_SPAWN] + t[T_MIGRATE]);
      ckpt = fmin(ckpt, t[T_SAVE] + t[T_CREATE] + t[T_LOAD]);
      if (rank == 0) {
        fprintf(stderr, "elastic.migrate zero %d, run %d:", zeros[z], r + 1);
        for (int k = 0; k < NT; k++) fprintf(stderr, " %s %.3f s", part_names[k], t[k]);
        fprintf(stderr, "\n");
      }
    }
    if (rank == 0) {
      fprintf(stderr, "elastic.migrate zero %d: %zu parameters, best of %d: migration %.3f s (spawn+merge %.3f, "
              "create+move %.3f), checkpoint %.3f s (save %.3f, create %.3f, load %.3f)\n", zeros[z],
              par_gpt_param_count(&mc), repeats, mig, best[T_SPAWN], best[T_MIGRATE], ckpt, best[T_SAVE],
              best[T_CREATE], best[T_LOAD]);
      printf("BENCH elastic.migrate%s value=%.4f unit=s baseline=%.4f ratio=%.3f\n", zeros[z] ? ".zero3" : "", mig,
             ckpt, mig / ckpt);
      fflush(stdout);
    }
    par_engine_destroy(old);
    par_data_destroy(d);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    unlink(path);
    rmdir(dir);
  }
  MPI_Finalize();
  return 0;
}
