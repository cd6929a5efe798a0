/* Every collective, dtype and reduction on n ranks against a reference each
 * rank computes locally, blocking and non-blocking, in and out of place, with
 * the traffic counters checked against the ring formulas written out here.
 *
 * Values are small integers (|v| <= 6), so every sum over up to 8 ranks is
 * exact in every dtype, bf16 (8 significant bits) included: results must
 * match exactly, except AVG of floats (one rounding of sum/n, allowed one
 * unit in the last place of the type). Exit status 0 = all passed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/comm.h>
#include <strata/half.h>

#include "mpitest.h"

static double get(comm_dtype_t dt, const void *b, size_t i) {
  switch (dt) {
  case COMM_F32: return ((const float *)b)[i];
  case COMM_F64: return ((const double *)b)[i];
  case COMM_F16: return strata_f16_to_f32(((const uint16_t *)b)[i]);
  case COMM_BF16: return strata_bf16_to_f32(((const uint16_t *)b)[i]);
  case COMM_I32: return ((const int32_t *)b)[i];
  case COMM_I64: return (double)((const int64_t *)b)[i];
  default: return ((const uint8_t *)b)[i];
  }
}
static void set(comm_dtype_t dt, void *b, size_t i, double v) {
  switch (dt) {
  case COMM_F32: ((float *)b)[i] = (float)v; break;
  case COMM_F64: ((double *)b)[i] = v; break;
  case COMM_F16: ((uint16_t *)b)[i] = strata_f32_to_f16((float)v); break;
  case COMM_BF16: ((uint16_t *)b)[i] = strata_f32_to_bf16((float)v); break;
  case COMM_I32: ((int32_t *)b)[i] = (int32_t)v; break;
  case COMM_I64: ((int64_t *)b)[i] = (int64_t)v; break;
  default: ((uint8_t *)b)[i] = (uint8_t)v; break;
  }
}
static int is_float(comm_dtype_t dt) { return dt <= COMM_BF16; }
static double ulp(comm_dtype_t dt) {
  return dt == COMM_F16 ? 1.0 / 1024 : dt == COMM_BF16 ? 1.0 / 128 : dt == COMM_F32 ? 1.2e-7 : 2.3e-16;
}

/* The value rank r holds at element i (u8: non-negative). */
static double val(comm_dtype_t dt, int r, size_t i) {
  if (dt == COMM_U8) return (double)((r * 5 + i * 3) % 7);
  return (double)((long)((r * 7 + i * 3) % 13) - 6);
}

static double reduce_ref(comm_dtype_t dt, comm_op_t op, size_t i, int n) {
  double acc = val(dt, 0, i);
  for (int r = 1; r < n; r++) {
    double v = val(dt, r, i);
    acc = op == COMM_MAX ? fmax(acc, v) : op == COMM_MIN ? fmin(acc, v) : acc + v;
  }
  if (op == COMM_AVG) acc = is_float(dt) ? acc / n : trunc(acc / n);
  return acc;
}

static void expect(comm_dtype_t dt, comm_op_t op, const char *what, double got, double want,
                   size_t i) {
  double tol = (op == COMM_AVG && is_float(dt)) ? fabs(want) * ulp(dt) : 0;
  if (fabs(got - want) > tol)
    FAIL("%s %s op=%d element %zu: got %g, want %g", what, comm_dtype_name(dt), (int)op, i, got,
         want);
}

/* Bytes per rank from the ring formulas of comm.h (independent of libcomm's code). */
static void check_counter(comm_t *c, comm_kind_t k, const comm_counter_t *before, double sent,
                          double recvd, const char *what) {
  comm_counter_t now;
  comm_counters(c, k, &now);
  uint64_t ds = now.bytes_sent - before->bytes_sent, dr = now.bytes_recv - before->bytes_recv;
  if (now.calls != before->calls + 1) FAIL("%s: calls %llu -> %llu", what,
                                           (unsigned long long)before->calls,
                                           (unsigned long long)now.calls);
  if (ds != (uint64_t)floor(sent) || dr != (uint64_t)floor(recvd))
    FAIL("%s: counted sent %llu recv %llu, formula %.0f / %.0f", what, (unsigned long long)ds,
         (unsigned long long)dr, floor(sent), floor(recvd));
}

static void test_dtype(comm_t *c, comm_dtype_t dt, size_t N) {
  size_t es = comm_dtype_size(dt);
  double n = size, B = (double)N * (double)es;
  char *send = malloc(N * es * size), *recv = malloc(N * es * size);
  comm_counter_t before;
  for (comm_op_t op = COMM_SUM; op < COMM_NOPS; op++) {
    for (int mode = 0; mode < 3; mode++) { /* out of place, in place, non-blocking */
      for (size_t i = 0; i < N; i++) set(dt, send, i, val(dt, rank, i));
      comm_counters(c, COMM_K_ALLREDUCE, &before);
      int rc;
      if (mode == 0) rc = comm_allreduce(c, recv, send, N, dt, op);
      else if (mode == 1) {
        memcpy(recv, send, N * es);
        rc = comm_allreduce(c, recv, recv, N, dt, op);
      } else {
        comm_request_t *req;
        rc = comm_iallreduce(c, recv, send, N, dt, op, &req);
        int done = 0;
        if (rc == STRATA_OK) rc = comm_test(&req, &done);
        if (rc == STRATA_OK && !done) rc = comm_wait(&req);
        if (req) FAIL("request not cleared after completion");
      }
      if (rc) FAIL("allreduce mode %d: %s", mode, comm_last_error(c));
      for (size_t i = 0; i < N; i++)
        expect(dt, op, "allreduce", get(dt, recv, i), reduce_ref(dt, op, i, size), i);
      check_counter(c, COMM_K_ALLREDUCE, &before, 2 * (n - 1) * B / n, 2 * (n - 1) * B / n,
                    "allreduce");
    }
    /* reduce to the last rank */
    int root = size - 1;
    comm_counters(c, COMM_K_REDUCE, &before);
    memset(recv, 0, N * es);
    if (comm_reduce(c, rank == root ? recv : NULL, send, N, dt, op, root))
      FAIL("reduce: %s", comm_last_error(c));
    if (rank == root)
      for (size_t i = 0; i < N; i++)
        expect(dt, op, "reduce", get(dt, recv, i), reduce_ref(dt, op, i, size), i);
    if (size > 1)
      check_counter(c, COMM_K_REDUCE, &before,
                    floor((n - 1) * B / n) + (rank == root ? 0 : floor(B / n)),
                    floor((n - 1) * B / n) + (rank == root ? floor((n - 1) * B / n) : 0), "reduce");
    /* reduce_scatter: block r of every rank's send */
    for (size_t i = 0; i < N * size; i++) set(dt, send, i, val(dt, rank, i));
    for (int inplace = 0; inplace < 2; inplace++) {
      comm_counters(c, COMM_K_REDUCE_SCATTER, &before);
      if (inplace) memcpy(recv, send, N * es * size);
      if (comm_reduce_scatter(c, recv, inplace ? recv : send, N, dt, op))
        FAIL("reduce_scatter: %s", comm_last_error(c));
      for (size_t i = 0; i < N; i++)
        expect(dt, op, "reduce_scatter", get(dt, recv, i),
               reduce_ref(dt, op, (size_t)rank * N + i, size), i);
      check_counter(c, COMM_K_REDUCE_SCATTER, &before, (n - 1) * B, (n - 1) * B, "reduce_scatter");
    }
  }
  /* broadcast */
  int root = 1 % size;
  for (size_t i = 0; i < N; i++) set(dt, recv, i, val(dt, rank, i));
  comm_counters(c, COMM_K_BROADCAST, &before);
  if (comm_broadcast(c, recv, N, dt, root)) FAIL("broadcast: %s", comm_last_error(c));
  for (size_t i = 0; i < N; i++) expect(dt, COMM_SUM, "broadcast", get(dt, recv, i), val(dt, root, i), i);
  if (size > 1)
    check_counter(c, COMM_K_BROADCAST, &before, rank == root ? B : 0, rank == root ? 0 : B,
                  "broadcast");
  /* allgather, out of place and in place */
  for (int inplace = 0; inplace < 2; inplace++) {
    for (size_t i = 0; i < N; i++) set(dt, send, i, val(dt, rank, i));
    const void *src = send;
    if (inplace) {
      memcpy(recv + (size_t)rank * N * es, send, N * es);
      src = recv + (size_t)rank * N * es;
    }
    comm_counters(c, COMM_K_ALLGATHER, &before);
    if (comm_allgather(c, recv, src, N, dt)) FAIL("allgather: %s", comm_last_error(c));
    for (int r = 0; r < size; r++)
      for (size_t i = 0; i < N; i++)
        expect(dt, COMM_SUM, "allgather", get(dt, recv, (size_t)r * N + i), val(dt, r, i), i);
    check_counter(c, COMM_K_ALLGATHER, &before, (n - 1) * B, (n - 1) * B, "allgather");
  }
  /* allgatherv with counts r % 3 (rank 0 contributes nothing) */
  size_t *counts = malloc(sizeof(size_t) * size), total = 0, off = 0;
  for (int r = 0; r < size; r++) total += counts[r] = (size_t)(r % 3) * 5;
  for (size_t i = 0; i < counts[rank]; i++) set(dt, send, i, val(dt, rank, i));
  comm_counters(c, COMM_K_ALLGATHERV, &before);
  if (comm_allgatherv(c, recv, send, counts, dt)) FAIL("allgatherv: %s", comm_last_error(c));
  for (int r = 0; r < size; r++) {
    for (size_t i = 0; i < counts[r]; i++)
      expect(dt, COMM_SUM, "allgatherv", get(dt, recv, off + i), val(dt, r, i), i);
    off += counts[r];
  }
  check_counter(c, COMM_K_ALLGATHERV, &before, (double)(total - counts[(rank + 1) % size]) * es,
                (double)(total - counts[rank]) * es, "allgatherv");
  free(counts);
  /* alltoall: block j of rank r holds val(r, j*N+i); rank r receives block r of every rank */
  for (int inplace = 0; inplace < 2; inplace++) {
    for (size_t i = 0; i < N * size; i++) set(dt, inplace ? recv : send, i, val(dt, rank, i));
    comm_counters(c, COMM_K_ALLTOALL, &before);
    if (comm_alltoall(c, recv, inplace ? recv : send, N, dt)) FAIL("alltoall: %s", comm_last_error(c));
    for (int r = 0; r < size; r++)
      for (size_t i = 0; i < N; i++)
        expect(dt, COMM_SUM, "alltoall", get(dt, recv, (size_t)r * N + i),
               val(dt, r, (size_t)rank * N + i), i);
    check_counter(c, COMM_K_ALLTOALL, &before, (n - 1) * B, (n - 1) * B, "alltoall");
  }
  /* a ring of send/recv, non-blocking receive so that nobody deadlocks */
  if (size > 1) {
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    comm_request_t *req;
    for (size_t i = 0; i < N; i++) set(dt, send, i, val(dt, rank, i));
    if (comm_irecv(c, recv, N, dt, from, 5, &req)) FAIL("irecv: %s", comm_last_error(c));
    if (comm_send(c, send, N, dt, to, 5)) FAIL("send: %s", comm_last_error(c));
    if (comm_wait(&req)) FAIL("wait recv: %s", comm_last_error(c));
    for (size_t i = 0; i < N; i++) expect(dt, COMM_SUM, "send/recv", get(dt, recv, i), val(dt, from, i), i);
  }
  free(send);
  free(recv);
}

int main(int argc, char **argv) {
  comm_t *c;
  if (comm_init(&c, NULL)) {
    fprintf(stderr, "comm_init failed\n");
    return 1;
  }
  rank = comm_rank(c);
  size = comm_size(c);
  size_t N = argc > 1 ? (size_t)atol(argv[1]) : 37;
  for (comm_dtype_t dt = COMM_F32; dt < COMM_NDTYPES; dt++) test_dtype(c, dt, N);
  /* a large buffer, where MPI switches to segmented algorithms */
  test_dtype(c, COMM_F32, (size_t)1 << 17);
  /* the same through a watchdog-enabled duplicate (the polling path) */
  comm_t *w;
  comm_dup(&w, c);
  comm_set_timeout(w, 60.0, COMM_ON_TIMEOUT_ERROR);
  test_dtype(w, COMM_BF16, N);
  if (comm_barrier(w)) FAIL("barrier: %s", comm_last_error(w));
  comm_destroy(w);
  int total = mpitest_total("collectives");
  comm_destroy(c);
  comm_finalize();
  return total ? 1 : 0;
}
