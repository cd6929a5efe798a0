/* Growing a group (comm_spawn / comm_spawned) on n ranks that start 3 more:
 * 1. In the starting processes comm_spawned gives MPI_COMM_NULL.
 * 2. The merged communicator holds the old ranks first, in their order, then
 *    the new ones in the order of their own MPI_COMM_WORLD; the new ones get
 *    the arguments given; libcomm adopts it and an allreduce over it sums
 *    every rank.
 * 3. A command that is not an executable file is refused on every old rank
 *    with STRATA_EINVAL naming it, and the job goes on (Open MPI itself
 *    would end it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/comm.h>

#include "mpitest.h"

enum { NEW = 3 };

/* Ranks and sums over the merged communicator, on old and new ranks alike;
 * the new ranks' failures are summed into the old ranks' count. */
static void check_grown(MPI_Comm grown, int old, int expect_rank) {
  int r, n;
  MPI_Comm_rank(grown, &r);
  MPI_Comm_size(grown, &n);
  if (n != old + NEW) FAIL("grown size %d, want %d + %d", n, old, NEW);
  if (r != expect_rank) FAIL("grown rank %d, want %d", r, expect_rank);
  comm_t *c = NULL;
  if (comm_from_mpi(&c, grown, NULL) != STRATA_OK) {
    FAIL("comm_from_mpi on the grown communicator");
    return;
  }
  int64_t x = r, sum = 0;
  if (comm_allreduce(c, &sum, &x, 1, COMM_I64, COMM_SUM) != STRATA_OK || sum != (int64_t)n * (n - 1) / 2)
    FAIL("allreduce over the grown ranks: %lld (%s)", (long long)sum, comm_last_error(c));
  comm_destroy(c);
}

static int join(MPI_Comm grown, int child) {
  int mine = child ? failures : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, grown);
  return all;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm grown;
  char err[1024];
  if (comm_spawned(&grown, err, sizeof err) != STRATA_OK) {
    fprintf(stderr, "comm_spawned: %s\n", err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (grown != MPI_COMM_NULL) { /* a new process: argv[1] "child", argv[2] the old ranks */
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int old = argc > 2 ? atoi(argv[2]) : -1;
    if (argc != 3 || strcmp(argv[1], "child")) FAIL("the new process got %d arguments", argc - 1);
    if (size != NEW) FAIL("the new processes' world holds %d, want %d", size, NEW);
    check_grown(grown, old, old + rank);
    join(grown, 1);
    MPI_Comm_free(&grown);
    MPI_Finalize();
    return 0;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char self[4096], n[16];
  if (!realpath(argv[0], self)) MPI_Abort(MPI_COMM_WORLD, 1);
  snprintf(n, sizeof n, "%d", size);
  char *args[] = {"child", n, NULL};
  int rc = comm_spawn(MPI_COMM_WORLD, NEW, self, args, MPI_INFO_NULL, &grown, err, sizeof err);
  if (rc != STRATA_OK) {
    FAIL("comm_spawn: %s", err);
  } else {
    check_grown(grown, size, rank);
    failures += join(grown, 0);
    MPI_Comm_free(&grown);
  }
  rc = comm_spawn(MPI_COMM_WORLD, 2, "/nonexistent/strata-program", NULL, MPI_INFO_NULL, &grown, err, sizeof err);
  if (rc != STRATA_EINVAL || grown != MPI_COMM_NULL || !strstr(err, "/nonexistent/strata-program"))
    FAIL("a missing program: rc %d, '%s'", rc, err);
  int total = mpitest_total("comm_spawn");
  MPI_Finalize();
  return total ? 1 : 0;
}
