/* The watchdog: waits that report instead of hanging.
 *
 * While a rank waits on an operation with a timeout it polls its requests
 * and answers "where are you?" queries from its peers on the communicator's
 * side channel. When the timeout passes it asks every peer, collects the
 * answers for a short grace period, and reports: which ranks wait in the
 * same operation, which are in another one (and which), and which did not
 * answer, i.e. have not reached libcomm at all (busy computing, or hung). */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TAG_QUERY = 7001, TAG_REPLY = 7002 };

void comm_watch_serve(comm_t *c) {
  int flag = 0;
  MPI_Status st;
  for (;;) {
    if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_QUERY, c->side, &flag, &st) != MPI_SUCCESS || !flag) return;
    int64_t q[3];
    MPI_Recv(q, 3, MPI_INT64_T, st.MPI_SOURCE, TAG_QUERY, c->side, MPI_STATUS_IGNORE);
    int64_t *rep = c->replies[c->reply_slot++ % COMM_REPLY_SLOTS];
    rep[0] = q[0]; /* the asker's round, so stale answers can be told apart */
    rep[1] = c->busy_kind;
    rep[2] = (int64_t)c->busy_seq;
    rep[3] = c->rank;
    MPI_Request rq;
    /* Four words go eagerly; the slot ring outlives the send. */
    if (MPI_Isend(rep, 4, MPI_INT64_T, st.MPI_SOURCE, TAG_REPLY, c->side, &rq) == MPI_SUCCESS)
      MPI_Request_free(&rq);
  }
}

static void pause_briefly(long iter) {
  if (iter < 2000) return; /* spin first: most operations finish quickly */
  struct timespec ts = {0, iter < 20000 ? 20000 : 200000};
  nanosleep(&ts, NULL);
}

/* Asks every peer where it is; fills kind/seq per rank (-2 = no answer). */
static void survey(comm_t *c, double grace, int64_t *kind, int64_t *seq) {
  uint64_t round = ++c->round;
  int64_t q[3] = {(int64_t)round, c->busy_kind, (int64_t)c->busy_seq};
  int waiting = 0;
  for (int p = 0; p < c->size; p++) {
    kind[p] = -2;
    seq[p] = 0;
    if (p == c->rank) continue;
    MPI_Request rq;
    if (MPI_Isend(q, 3, MPI_INT64_T, p, TAG_QUERY, c->side, &rq) == MPI_SUCCESS) {
      MPI_Request_free(&rq);
      waiting++;
    }
  }
  kind[c->rank] = c->busy_kind;
  seq[c->rank] = (int64_t)c->busy_seq;
  double end = MPI_Wtime() + grace;
  for (long it = 0; waiting > 0 && MPI_Wtime() < end; it++) {
    int flag = 0;
    MPI_Status st;
    comm_watch_serve(c); /* the peers may be surveying us at the same time */
    MPI_Iprobe(MPI_ANY_SOURCE, TAG_REPLY, c->side, &flag, &st);
    if (!flag) {
      pause_briefly(it);
      continue;
    }
    int64_t rep[4];
    MPI_Recv(rep, 4, MPI_INT64_T, st.MPI_SOURCE, TAG_REPLY, c->side, MPI_STATUS_IGNORE);
    if ((uint64_t)rep[0] != round) continue; /* an answer to an earlier survey */
    kind[st.MPI_SOURCE] = rep[1];
    seq[st.MPI_SOURCE] = rep[2];
    waiting--;
  }
}

static size_t append(char *buf, size_t n, size_t k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t append(char *buf, size_t n, size_t k, const char *fmt, ...) {
  if (k >= n) return k;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + k, n - k, fmt, ap);
  va_end(ap);
  return w < 0 ? k : k + (size_t)w;
}

static int report(comm_t *c, comm_kind_t kind, uint64_t seq) {
  int64_t *kinds = malloc(sizeof(int64_t) * 2 * (size_t)c->size);
  if (!kinds) return comm_fail(c, STRATA_ETIMEOUT, "%s #%llu on '%s' timed out (no memory to survey)",
                               comm_kind_name(kind), (unsigned long long)seq, c->name);
  int64_t *seqs = kinds + c->size;
  double grace = c->cfg.timeout_s * 0.5;
  grace = grace < 0.2 ? 0.2 : grace > 2.0 ? 2.0 : grace;
  survey(c, grace, kinds, seqs);

  char *e = c->err;
  size_t n = sizeof c->err, k = 0;
  k = append(e, n, k, "watchdog: %s #%llu on communicator '%s' (%d ranks) did not complete within "
             "%.3g s on rank %d.", comm_kind_name(kind), (unsigned long long)seq, c->name, c->size,
             c->cfg.timeout_s, c->rank);
  const char *labels[3] = {" Waiting in it: ranks", " Not arrived (no answer: outside libcomm or "
                           "hung): ranks", " In another operation:"};
  for (int cls = 0; cls < 3; cls++) {
    int first = 1;
    for (int p = 0; p < c->size; p++) {
      int same = kinds[p] == (int64_t)kind && (uint64_t)seqs[p] == seq;
      int absent = kinds[p] == -2 || kinds[p] == -1;
      int mine = cls == 0 ? same : cls == 1 ? absent : (!same && !absent);
      if (!mine) continue;
      k = append(e, n, k, "%s", first ? labels[cls] : ",");
      if (cls == 2)
        k = append(e, n, k, " rank %d in %s #%lld", p, comm_kind_name((comm_kind_t)kinds[p]),
                   (long long)seqs[p]);
      else
        k = append(e, n, k, " %d", p);
      first = 0;
    }
    if (!first) k = append(e, n, k, ".");
  }
  free(kinds);
  if (c->cfg.on_timeout == COMM_ON_TIMEOUT_ABORT) {
    fprintf(stderr, "strata: %s Aborting the job.\n", c->err);
    fflush(stderr);
    MPI_Abort(c->mpi, 3);
  }
  return STRATA_ETIMEOUT;
}

int comm_watch_wait(comm_t *c, int nreq, MPI_Request *reqs, MPI_Status *st0, int *mpi_rc,
                    comm_kind_t kind, uint64_t seq) {
  double deadline = MPI_Wtime() + c->cfg.timeout_s;
  if (mpi_rc) *mpi_rc = MPI_SUCCESS;
  for (long it = 0;; it++) {
    int pending = 0;
    for (int i = 0; i < nreq; i++) {
      if (reqs[i] == MPI_REQUEST_NULL) continue;
      int flag = 0;
      int mrc = MPI_Test(&reqs[i], &flag, i == 0 && st0 ? st0 : MPI_STATUS_IGNORE);
      if (mrc != MPI_SUCCESS && mpi_rc && *mpi_rc == MPI_SUCCESS) *mpi_rc = mrc;
      if (!flag && mrc == MPI_SUCCESS) pending = 1;
    }
    if (!pending) return STRATA_OK;
    comm_watch_serve(c);
    if (c->cfg.timeout_s > 0 && MPI_Wtime() > deadline) return report(c, kind, seq);
    pause_briefly(it);
  }
}
