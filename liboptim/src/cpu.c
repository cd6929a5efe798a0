/* The CPU driver: one OpenMP team per call over all tensors at once.
 *
 * The elements of all jobs are laid end to end and cut into one contiguous
 * range per thread (cuts rounded to 16 elements, one cache line of floats),
 * so that a few huge tensors and many small ones both load every thread
 * evenly, and so that a thread touches the same pages on every call (the
 * first-touch placement of the arrays stays local). Per-tensor sums are
 * accumulated per thread and combined in thread order: the result depends
 * on the thread count only, never on scheduling. */
#include <omp.h>
#include <stdlib.h>

#include <strata/optim.h>

#include "internal.h"

/* Below this many elements in total a single thread is faster than waking
 * the team. */
#define PARALLEL_MIN 32768

static int has_sums(int op) {
  return op == OP_LAMB_PARTS || op == OP_LARS_PARTS || op == OP_GRAD_SUMSQ;
}

static void run_range(const optim_range_fn fn, const optim_job *jobs, int nj, const size_t *off,
                      size_t lo, size_t hi, double *s) {
  int i = 0;
  while (i < nj && off[i + 1] <= lo)
    i++;
  for (; i < nj && off[i] < hi; i++) {
    size_t a = lo > off[i] ? lo - off[i] : 0;
    size_t b = (hi < off[i + 1] ? hi : off[i + 1]) - off[i];
    if (b > a) fn(&jobs[i], a, b, s ? s + 2 * (size_t)i : NULL);
  }
}

int optim_cpu_run(const optim_range_fn *table, int op, const optim_job *jobs, int nj, int nthreads,
                  double *sums) {
  int rc = STRATA_ENOMEM;
  size_t *off = NULL;
  double *part = NULL;
  const optim_range_fn fn = table[op];
  const int want = has_sums(op);

  off = malloc(((size_t)nj + 1) * sizeof *off);
  if (!off) goto fail;
  off[0] = 0;
  for (int i = 0; i < nj; i++)
    off[i + 1] = off[i] + jobs[i].n;
  const size_t total = off[nj];
  if (nthreads <= 0) nthreads = omp_get_max_threads();
  if (total < PARALLEL_MIN) nthreads = 1;
  if (want) {
    part = calloc((size_t)nthreads * 2 * (size_t)nj, sizeof *part);
    if (!part) goto fail;
  }

#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  {
    const int nth = omp_get_num_threads(), tid = omp_get_thread_num();
    size_t lo = (size_t)((double)total * tid / nth) & ~(size_t)15;
    size_t hi = tid == nth - 1 ? total : (size_t)((double)total * (tid + 1) / nth) & ~(size_t)15;
    run_range(fn, jobs, nj, off, lo, hi, want ? part + (size_t)tid * 2 * nj : NULL);
  }

  if (want) {
    for (size_t k = 0; k < 2 * (size_t)nj; k++) {
      double s = 0.0;
      for (int t = 0; t < nthreads; t++)
        s += part[(size_t)t * 2 * nj + k];
      sums[k] = s;
    }
  }
  rc = STRATA_OK;
fail:
  free(part);
  free(off);
  return rc;
}
