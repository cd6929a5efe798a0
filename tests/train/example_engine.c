/* Usage example of the training engine (strata/par_train.h) with no Lua: a
 * small GPT on the generated Markov corpus, trained data parallel with
 * ZeRO-3 (parameters, gradients and optimizer state sharded) over however
 * many ranks mpirun starts, with a checkpoint and a metrics file.
 * Built and run by the tests (1 and 2 ranks) so that it keeps compiling and
 * working; exits 0 when the validation loss fell well below ln 256.
 *
 *   mpirun -np 2 build/bin/example_engine [OUT_DIR] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strata/parallel.h>

static void progress(void *ctx, const par_progress_t *p) {
  if (p->rank == 0 && !p->begin && (p->step % 20 == 0 || p->evaluated))
    printf("step %ld/%ld loss %.4f val %.4f %.1fk tok/s\n", p->step, p->steps, p->loss,
           p->last_val_loss, p->tokens_per_s / 1e3);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/tmp";
  char ckpt[1024], metrics[1024], err[1024];
  snprintf(ckpt, sizeof ckpt, "%s/engine-ckpt.h5", dir);
  snprintf(metrics, sizeof metrics, "%s/engine-metrics.h5", dir);
  MPI_Init(&argc, &argv);
  int ranks, rc = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  par_data_options_t dopt = PAR_DATA_DEFAULTS; /* the Markov corpus, entropy known */
  dopt.seq = 32;
  dopt.markov_tokens = 1 << 18;
  par_data_t *data = NULL;
  par_engine_t *e = NULL;
  if (par_data_open(&dopt, &data, err, sizeof err)) goto out;

  par_gpt_config_t mc = {.layers = 1, .hidden = 32, .heads = 2, .seq = 32, .vocab = 256};
  par_layout_t lay = PAR_LAYOUT_DEFAULTS;
  lay.dp = ranks;
  lay.zero_stage = 3;   /* each rank holds 1/ranks of the model states */
  lay.global_batch = 8; /* the same batch whatever the rank count: */
  lay.microbatch = 4;   /* two microbatches on one rank, one each on two */
  par_optim_config_t oc = PAR_OPTIM_CONFIG_DEFAULTS;
  oc.lr = 1e-2, oc.warmup = 10;
  par_engine_options_t eo = PAR_ENGINE_OPTIONS_DEFAULTS;
  eo.steps = 120;
  eo.threads = 1;
  if (par_engine_create(&e, &mc, &lay, &oc, &eo, err, sizeof err)) goto out;

  par_train_options_t to = PAR_TRAIN_OPTIONS_DEFAULTS;
  to.steps = eo.steps;
  to.eval_every = 60;
  to.eval_batches = 4;
  to.ckpt_path = ckpt;
  to.metrics_path = metrics;
  to.progress = progress;
  par_train_result_t res;
  if (par_train_run(e, data, &to, &res)) {
    snprintf(err, sizeof err, "%s", par_engine_error(e));
    goto out;
  }
  double h = par_data_entropy_rate(data);
  if (res.last_ckpt_step != 120 || !(res.val_loss < 3.5)) {
    snprintf(err, sizeof err, "val loss %.4f (ln 256 = 5.545), last checkpoint %ld", res.val_loss,
             res.last_ckpt_step);
    goto out;
  }
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    printf("%d rank(s): val loss %.4f, source entropy %.4f, %.1fk tokens/s\n", ranks, res.val_loss, h,
           res.tokens_per_s / 1e3);
  rc = 0;
out:
  if (rc) fprintf(stderr, "example_engine: %s\n", err);
  par_engine_destroy(e);
  par_data_destroy(data);
  MPI_Finalize();
  return rc;
}
