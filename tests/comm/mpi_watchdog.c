/* The watchdog and the cross-rank argument check, on n >= 2 ranks.
 *   late      the last rank never joins an allreduce: the others get
 *             STRATA_ETIMEOUT naming it as not arrived, then ESTATE
 *   abort     the same with on_timeout = abort (run by watchdog_abort.sh)
 *   mismatch  different operations, then different counts: STRATA_EINVAL
 *             naming every rank's arguments, and the communicator still works
 *   recv      receive lengths that differ from the message */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strata/comm.h>

#include "mpitest.h"

static void late(comm_t *world, comm_timeout_action_t action) {
  comm_t *c;
  comm_dup(&c, world);
  comm_set_name(c, "grads");
  comm_set_timeout(c, 1.0, action);
  float x[8] = {1};
  int last = size - 1;
  if (rank != last) {
    int rc = comm_allreduce(c, x, x, 8, COMM_F32, COMM_SUM);
    const char *msg = comm_last_error(c);
    char who[96];
    snprintf(who, sizeof who, "Not arrived (no answer: outside libcomm or hung): ranks %d.", last);
    if (rc != STRATA_ETIMEOUT || !strstr(msg, "allreduce #0") || !strstr(msg, "'grads'") ||
        !strstr(msg, who) || !strstr(msg, "Waiting in it: ranks 0"))
      FAIL("late: rc %d, message '%s'", rc, msg);
    if (comm_allreduce(c, x, x, 8, COMM_F32, COMM_SUM) != STRATA_ESTATE)
      FAIL("a failed communicator accepted another operation");
  } else {
    sleep(3); /* busy elsewhere, well past the others' timeout */
  }
  /* the failed communicator holds a request MPI cannot cancel: leave it */
  MPI_Barrier(comm_mpi(world));
}

static void mismatch(comm_t *c) {
  float x[16];
  for (int i = 0; i < 16; i++) x[i] = 1;
  int rc = rank == 0 ? comm_allreduce(c, x, x, 16, COMM_F32, COMM_SUM)
                     : comm_broadcast(c, x, 16, COMM_F32, 0);
  const char *msg = comm_last_error(c);
  if (rc != STRATA_EINVAL || !strstr(msg, "mismatched") ||
      !strstr(msg, "rank 0: allreduce #0 count=16 f32 sum") ||
      !strstr(msg, "rank 1: broadcast #0 count=16 f32 root=0"))
    FAIL("kind mismatch: rc %d, message '%s'", rc, msg);
  rc = comm_allreduce(c, x, x, rank == 0 ? 10 : 11, COMM_F32, COMM_SUM);
  msg = comm_last_error(c);
  if (rc != STRATA_EINVAL || !strstr(msg, "rank 0: allreduce #1 count=10") ||
      !strstr(msg, "rank 1: allreduce #1 count=11"))
    FAIL("count mismatch: rc %d, message '%s'", rc, msg);
  /* a blocking mismatch is caught before anything is posted: c still works */
  for (int i = 0; i < 16; i++) x[i] = (float)rank;
  if (comm_allreduce(c, x, x, 16, COMM_F32, COMM_SUM)) FAIL("after mismatch: %s", msg);
  if (x[5] != (float)(size * (size - 1) / 2)) FAIL("after mismatch: sum %g", x[5]);
}

static void recv_lengths(comm_t *c) {
  float x[8] = {0};
  if (rank == 0) {
    comm_send(c, x, 5, COMM_F32, 1, 3);
    comm_send(c, x, 3, COMM_F32, 1, 4);
  } else if (rank == 1) {
    int rc = comm_recv(c, x, 4, COMM_F32, 0, 3);
    if (rc != STRATA_EINVAL || !strstr(comm_last_error(c), "longer than the 4 f32"))
      FAIL("long message: rc %d '%s'", rc, comm_last_error(c));
    rc = comm_recv(c, x, 4, COMM_F32, 0, 4);
    if (rc != STRATA_EINVAL || !strstr(comm_last_error(c), "expected 4 f32, got 3"))
      FAIL("short message: rc %d '%s'", rc, comm_last_error(c));
  }
  if (comm_send(c, x, 1, COMM_F32, size, 0) != STRATA_EINVAL ||
      !strstr(comm_last_error(c), "peer rank"))
    FAIL("peer out of range accepted: %s", comm_last_error(c));
}

int main(int argc, char **argv) {
  comm_t *world;
  if (argc < 2 || comm_init(&world, NULL)) return 2;
  rank = comm_rank(world);
  size = comm_size(world);
  if (!strcmp(argv[1], "late")) late(world, COMM_ON_TIMEOUT_ERROR);
  else if (!strcmp(argv[1], "abort")) late(world, COMM_ON_TIMEOUT_ABORT);
  else if (!strcmp(argv[1], "mismatch")) mismatch(world);
  else if (!strcmp(argv[1], "recv")) recv_lengths(world);
  else return 2;
  int total = mpitest_total(argv[1]);
  comm_destroy(world);
  comm_finalize();
  return total ? 1 : 0;
}
