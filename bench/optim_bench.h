/* What the liboptim benchmarks (optim_cpu.c, optim_gpu.c) share: the kinds
 * they time with the bytes each moves per element per step (counted as
 * STREAM counts them; optim_cpu.c explains the count), and the split of the
 * flat arrays into equal tensors, so that the multi-tensor path runs. */
#ifndef STRATA_BENCH_OPTIM_H
#define STRATA_BENCH_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <strata/optim.h>

typedef struct {
  const char *name;
  int kind;     /* OPTIM_ADAMW, ... */
  int lowp;     /* 1: the update also writes a bf16 copy of the parameters */
  double bytes; /* per element per step */
} bench_optim_kind;

#define BENCH_OPTIM_KIND_NAMES "adamw, adamw_bf16, lamb"

/* The kind called name, or NULL. */
static inline const bench_optim_kind *bench_optim_kind_find(const char *name) {
  static const bench_optim_kind kinds[] = {
      {"adamw", OPTIM_ADAMW, 0, 28},      /* read p g m v, write p m v: 7 x 4 */
      {"adamw_bf16", OPTIM_ADAMW, 1, 30}, /* the same plus a bf16 copy of p: + 2 */
      {"lamb", OPTIM_LAMB, 0, 40},        /* phase one p g m v -> m v, two p m v -> p: 10 x 4 */
  };
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (!strcmp(kinds[i].name, name)) return &kinds[i];
  return NULL;
}

/* t[0..nt) over equal consecutive ranges of the n-element arrays (h, the bf16
 * copy, may be NULL), all in parameter group `group`. */
static inline void bench_optim_tensors(optim_tensor *t, int nt, float *p, float *g, float *m,
                                       float *v, uint16_t *h, size_t n, int group) {
  for (int k = 0; k < nt; k++) {
    size_t lo = n * k / nt, hi = n * (k + 1) / nt;
    t[k] = (optim_tensor){.param = p + lo,
                          .grad = g + lo,
                          .m = m + lo,
                          .v = v + lo,
                          .lowp = h ? (void *)(h + lo) : NULL,
                          .lowp_dtype = h ? OPTIM_LOWP_BF16 : OPTIM_LOWP_NONE,
                          .group = group,
                          .n = hi - lo};
  }
}

#endif
