/* A data set that makes a model's forward fail: this rank's token file
 * under dir, whose ids (300 to 399) exceed a vocabulary of 256, in samples
 * of seq tokens. The caller removes "<dir>/bad-<rank>.u16". */
#ifndef STRATA_TESTS_TRAIN_BAD_TOKENS_H
#define STRATA_TESTS_TRAIN_BAD_TOKENS_H

#include <stdint.h>
#include <stdio.h>
#include <strata/parallel.h>

static par_data_t *bad_tokens(const char *dir, int rank, int seq) {
  char path[600], err[512];
  snprintf(path, sizeof path, "%s/bad-%d.u16", dir, rank);
  FILE *f = fopen(path, "wb");
  if (!f) MPI_Abort(MPI_COMM_WORLD, 1);
  for (int i = 0; i < 4096; i++) {
    uint16_t t = (uint16_t)(300 + i % 100);
    fwrite(&t, 2, 1, f);
  }
  fclose(f);
  par_data_options_t o = PAR_DATA_DEFAULTS;
  o.format = PAR_DATA_U16, o.path = path, o.seq = seq;
  par_data_t *d = NULL;
  if (par_data_open(&o, &d, err, sizeof err)) MPI_Abort(MPI_COMM_WORLD, 1);
  return d;
}

#endif
