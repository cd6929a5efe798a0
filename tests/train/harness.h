/* What the engine tests under tests/train share: an engine or a Markov
 * data set that ends the job with the reason when it cannot be made (a
 * setup error is no test result). harness_name prefixes those lines. */
#ifndef STRATA_TESTS_TRAIN_HARNESS_H
#define STRATA_TESTS_TRAIN_HARNESS_H

#include <stdio.h>
#include <strata/parallel.h>

static const char *harness_name = "test";

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

#endif
