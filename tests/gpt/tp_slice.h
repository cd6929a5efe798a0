/* Tensor parallelism's slices, for the tests that compare a tensor-parallel
 * model with the serial one (tests/gpt/tp_equiv.c, tests/train/harness.h). */
#ifndef STRATA_TESTS_GPT_TP_SLICE_H
#define STRATA_TESTS_GPT_TP_SLICE_H

#include <stdint.h>
#include <strata/par_gpt.h>

/* Tensor rank r's slice of a view in the serial model's global layout
 * (serial: the view's first element there) into the local layout of tv
 * (out), as par_gpt_split_t describes it. */
static inline void tp_slice_view(const par_gpt_view_t *tv, const float *serial, float *out, int r) {
  int64_t R = tv->shape[0], C = tv->ndim > 1 ? tv->shape[1] : 1, GC = tv->ndim > 1 ? tv->global[1] : 1;
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++) {
      int64_t gi = i, gj = j;
      if (tv->split == PAR_GPT_SPLIT_ROWS) gi = r * R + i;
      else if (tv->split == PAR_GPT_SPLIT_COLS) gj = r * C + j;
      else if (tv->split == PAR_GPT_SPLIT_QKV) gi = (i / (R / 3)) * (tv->global[0] / 3) + r * (R / 3) + i % (R / 3);
      else if (tv->split == PAR_GPT_SPLIT_BLOCK) { /* 2D, 2.5D, 3D: the block the view names */
        int64_t pr = R / tv->block.parts;
        gi = (i / pr) * tv->block.part_rows + tv->block.row0 + i % pr, gj = tv->block.col0 + j;
      }
      out[i * C + j] = serial[gi * GC + gj];
    }
}

#endif
