/* Shared by libcomm's multi-rank test programs: failures are counted per
 * rank, printed with the rank, and summed over the job at the end. */
#ifndef STRATA_TESTS_MPITEST_H
#define STRATA_TESTS_MPITEST_H
#include <mpi.h>
#include <stdio.h>

static int failures, rank, size;

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fprintf(stderr, "rank %d: ", rank);                                                            \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n");                                                                         \
    failures++;                                                                                    \
  } while (0)

/* Sum of failures over every rank of MPI_COMM_WORLD; rank 0 prints the verdict. */
static inline int mpitest_total(const char *what) {
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("%s on %d ranks: %s (%d failures)\n", what, size, total ? "FAIL" : "ok", total);
  return total;
}
#endif
