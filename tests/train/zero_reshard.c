/* Checkpoints that reshard (mpirun -np 4): a run saved under each layout
 * (dp, ZeRO) in {1, 2, 4} x {0, 1, 3} loads under each of them, 81 pairs.
 * For every pair:
 *  - the loaded parameters equal the saved ones exactly (the file holds
 *    every float as it was, whatever the shards that wrote or read it);
 *  - the next two steps' losses equal the writer's own next two steps
 *    within 1e-6 relative: the first checks the parameters and the data
 *    position, the second the optimizer state (AdamW's m and v) and its
 *    step count. The global batch is the same (4 sequences); only the order
 *    in which the ranks' partial losses and gradients are summed differs:
 *    fp32 rounding, about 1e-7 (the bound of zero_equiv, argued there);
 *  - with the writer's own layout, both losses are equal to the bit (a
 *    resumed run is the run that was not interrupted).
 * And every checkpoint loads under dp = 3 (ZeRO 1 and 3, shards of 3 that
 * the writers' never were) with the parameters exactly the saved ones, and
 * a step runs; its global batch of 3 cannot be the writer's 4, so the
 * losses are not compared.
 * Exits non-zero on failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strata/parallel.h>

#include "harness.h"
#include <string.h>

/* Regions that 4 ranks do not divide into whole aligned shards: padded. */
static par_gpt_config_t mc = {.layers = 2, .hidden = 24, .heads = 3, .seq = 18, .vocab = 256};
enum { GLOBAL = 4, SAVE_AT = 3 };
static const int dps[] = {1, 2, 4}, zeros[] = {0, 1, 3};

static par_engine_t *engine(MPI_Comm comm, int dp, int zero) {
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = dp, lay.zero_stage = zero, lay.microbatch = dp == 3 ? 1 : GLOBAL / dp, lay.global_batch = dp == 3 ? 3 : GLOBAL;
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  oc.lr = 1e-2, oc.warmup = 2, oc.weight_decay = 0.01;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 10, eo.threads = 1, eo.seed = 3, eo.comm = comm, eo.collective_timeout_s = 120;
  return make_engine(&mc, &lay, &oc, &eo);
}

static par_data_t *data(void) { return markov_data(mc.seq); }

/* Two steps; their losses into loss[0..1]. */
static void two_steps(par_engine_t *e, par_data_t *d, double loss[2], const char *who) {
  for (int i = 0; i < 2; i++) {
    par_step_t st;
    int rc = par_engine_step(e, d, &st);
    CHECK(rc == STRATA_OK, "%s: step: %s", who, par_engine_error(e));
    loss[i] = st.loss;
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  harness_name = "zero_reshard";
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != 4) {
    if (rank == 0) fprintf(stderr, "zero_reshard: run with mpirun -np 4\n");
    MPI_Finalize();
    return 1;
  }
  char dir[] = "/tmp/strata-reshard-XXXXXX";
  if (rank == 0 && !mkdtemp(dir)) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  size_t np = par_gpt_param_count(&mc);
  float *saved = malloc(np * sizeof *saved), *loaded = malloc(np * sizeof *loaded);
  int pairs = 0;
  for (int wi = 0; wi < 3; wi++)
    for (int wj = 0; wj < 3; wj++) {
      int wd = dps[wi], wz = zeros[wj];
      char path[600], who[64];
      snprintf(path, sizeof path, "%s/dp%d_zero%d.h5", dir, wd, wz);
      double after[2] = {0, 0}; /* the writer's steps after the save */
      MPI_Comm cw;
      MPI_Comm_split(MPI_COMM_WORLD, rank < wd, rank, &cw);
      if (rank < wd) {
        par_engine_t *e = engine(cw, wd, wz);
        par_data_t *d = data();
        double l[2];
        two_steps(e, d, l, "writer");
        par_step_t st;
        CHECK(par_engine_step(e, d, &st) == STRATA_OK, "writer step 3: %s", par_engine_error(e));
        CHECK(par_engine_save(e, path, d, SAVE_AT, NULL, 0) == STRATA_OK, "save dp=%d zero=%d: %s",
              wd, wz, par_engine_error(e));
        CHECK(par_engine_get_params(e, saved) == STRATA_OK, "get_params: %s", par_engine_error(e));
        two_steps(e, d, after, "writer");
        par_data_destroy(d);
        par_engine_destroy(e);
      }
      MPI_Comm_free(&cw);
      MPI_Bcast(after, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      for (int ri = 0; ri < 3; ri++)
        for (int rj = 0; rj < 3; rj++) {
          int rd = dps[ri], rz = zeros[rj];
          snprintf(who, sizeof who, "dp=%d zero=%d -> dp=%d zero=%d", wd, wz, rd, rz);
          MPI_Comm cr;
          MPI_Comm_split(MPI_COMM_WORLD, rank < rd, rank, &cr);
          if (rank < rd) {
            par_engine_t *e = engine(cr, rd, rz);
            par_data_t *d = data();
            long step = -1;
            int rc = par_engine_load(e, path, d, &step);
            CHECK(rc == STRATA_OK && step == SAVE_AT, "%s: load: rc %d step %ld: %s", who, rc, step,
                  par_engine_error(e));
            CHECK(par_engine_get_params(e, loaded) == STRATA_OK, "%s: get_params", who);
            if (rank == 0) {
              size_t bad = 0;
              for (size_t i = 0; i < np; i++)
                bad += memcmp(&saved[i], &loaded[i], sizeof *saved) != 0;
              CHECK(bad == 0, "%s: %zu of %zu parameters differ from the saved ones", who, bad, np);
            }
            double l[2];
            two_steps(e, d, l, who);
            if (rank == 0) {
              for (int i = 0; i < 2; i++) {
                double rel = fabs(l[i] - after[i]) / fabs(after[i]);
                CHECK(rel <= 1e-6, "%s: step %d loss %.9g, the writer's %.9g (rel %.2g > 1e-6)",
                      who, SAVE_AT + 1 + i, l[i], after[i], rel);
                if (rd == wd && rz == wz)
                  CHECK(l[i] == after[i], "%s: same layout, step %d loss %.17g != %.17g", who,
                        SAVE_AT + 1 + i, l[i], after[i]);
              }
            }
            par_data_destroy(d);
            par_engine_destroy(e);
          }
          MPI_Comm_free(&cr);
          pairs++;
        }
      for (int z3 = 1; z3 <= 3; z3 += 2) { /* dp = 3: shards the writers never had */
        MPI_Comm cr;
        snprintf(who, sizeof who, "dp=%d zero=%d -> dp=3 zero=%d", wd, wz, z3);
        MPI_Comm_split(MPI_COMM_WORLD, rank < 3, rank, &cr);
        if (rank < 3) {
          par_engine_t *e = engine(cr, 3, z3);
          par_data_t *d = data();
          long step = -1;
          int rc = par_engine_load(e, path, d, &step);
          CHECK(rc == STRATA_OK && step == SAVE_AT, "%s: load: rc %d step %ld: %s", who, rc, step, par_engine_error(e));
          CHECK(par_engine_get_params(e, loaded) == STRATA_OK, "%s: get_params", who);
          if (rank == 0) {
            size_t bad = 0;
            for (size_t i = 0; i < np; i++) bad += memcmp(&saved[i], &loaded[i], sizeof *saved) != 0;
            CHECK(bad == 0, "%s: %zu of %zu parameters differ from the saved ones", who, bad, np);
          }
          par_step_t st;
          CHECK(par_engine_step(e, d, &st) == STRATA_OK && isfinite(st.loss), "%s: a step: %s", who,
                par_engine_error(e));
          par_data_destroy(d);
          par_engine_destroy(e);
        }
        MPI_Comm_free(&cr);
        pairs++;
      }
    }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "zero_reshard: cannot remove %s\n", dir);
  }
  free(saved);
  free(loaded);
  char detail[64];
  snprintf(detail, sizeof detail, "%d save/load pairs", pairs);
  return harness_finish(detail);
}
