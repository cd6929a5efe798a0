/* libcomm's device path on one GPU: one NCCL rank (an Open MPI singleton),
 * or under mpirun several ranks, each on GPU (node-local rank) modulo the
 * GPUs, so that ranks share a GPU when there are more ranks than GPUs and
 * libcomm routes their device buffers through pinned host memory and MPI
 * (host staging, comm_is_staged), which must then give bit for bit what
 * the host path gives and count the same (the host path is MPI's: with
 * several ranks the reductions really reduce).
 *
 * Every operation, dtype and reduction, in and out of place, blocking and
 * non-blocking (wait, and test polled to completion), on two libcomm
 * communicators (so two NCCL communicators, the second with the watchdog
 * on), must give bit for bit the result of the same call on host buffers
 * (the MPI path) and count the same calls and bytes. With one rank every
 * reduction is the identity, so this checks the plumbing a wrong line would
 * break: the dtype mapping and element sizes, the count conventions of
 * reduce_scatter/allgather/alltoall, libcomm's in-place conventions, sends
 * and receives (to oneself: only possible inside one NCCL group), request
 * completion, counters, and that a device operation starts after the
 * caller's earlier work on the default stream. Inputs are small integers,
 * exact in every dtype, so that "bit for bit" is the right criterion.
 *
 * Run by `make test-gpu`; exit status 0 = passed, 1 = failed, 77 = no GPU. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/comm.h>
#include <strata/half.h>

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      if (failures++ < 30) {                                                                       \
        fprintf(stderr, "gpu_comm_nccl: " __VA_ARGS__);                                            \
        fprintf(stderr, "\n");                                                                     \
      }                                                                                            \
    }                                                                                              \
  } while (0)
#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "gpu_comm_nccl: %s: %s\n", #x, cudaGetErrorString(e_));                     \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

enum { N = 1031 };                    /* elements per block (odd, not a power of two) */
enum { BLOCKING, WAIT, TEST, NMODES }; /* how an operation is completed */
static const char *const mode_names[] = {"blocking", "wait", "test"};
static const char *const op_names[] = {"sum", "max", "min", "avg"};

/* Small integers, exact in every dtype. */
static void fill(void *buf, comm_dtype_t dt, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) {
    int v = (int)((i * 7 + (size_t)seed) % 23) - 11;
    switch (dt) {
    case COMM_F32: ((float *)buf)[i] = (float)v; break;
    case COMM_F64: ((double *)buf)[i] = v; break;
    case COMM_F16: ((uint16_t *)buf)[i] = strata_f32_to_f16((float)v); break;
    case COMM_BF16: ((uint16_t *)buf)[i] = strata_f32_to_bf16((float)v); break;
    case COMM_I32: ((int32_t *)buf)[i] = v; break;
    case COMM_I64: ((int64_t *)buf)[i] = v; break;
    default: ((uint8_t *)buf)[i] = (uint8_t)(v + 11); break;
    }
  }
}

/* Completes a non-blocking start per mode. */
static int complete(int rc, comm_request_t **req, int mode) {
  if (rc != STRATA_OK) return rc;
  if (mode == WAIT) return comm_wait(req);
  int done = 0;
  while (!done && rc == STRATA_OK) rc = comm_test(req, &done);
  return rc;
}

/* One operation of kind k on (recv, send), blocks of N elements. */
static int run_op(comm_t *c, comm_kind_t k, void *recv, void *send, comm_dtype_t dt, comm_op_t op,
                  int mode) {
  comm_request_t *req = NULL, *req2 = NULL;
  size_t counts[64];
  int me = comm_rank(c);
  for (int i = 0; i < comm_size(c) && i < 64; i++) counts[i] = N;
  const int b = mode == BLOCKING;
  int rc;
  switch (k) {
  case COMM_K_ALLREDUCE:
    return b ? comm_allreduce(c, recv, send, N, dt, op)
             : complete(comm_iallreduce(c, recv, send, N, dt, op, &req), &req, mode);
  case COMM_K_REDUCE:
    return b ? comm_reduce(c, recv, send, N, dt, op, 0)
             : complete(comm_ireduce(c, recv, send, N, dt, op, 0, &req), &req, mode);
  case COMM_K_BROADCAST:
    return b ? comm_broadcast(c, recv, N, dt, 0)
             : complete(comm_ibroadcast(c, recv, N, dt, 0, &req), &req, mode);
  case COMM_K_ALLGATHER:
    return b ? comm_allgather(c, recv, send, N, dt)
             : complete(comm_iallgather(c, recv, send, N, dt, &req), &req, mode);
  case COMM_K_ALLGATHERV:
    return b ? comm_allgatherv(c, recv, send, counts, dt)
             : complete(comm_iallgatherv(c, recv, send, counts, dt, &req), &req, mode);
  case COMM_K_REDUCE_SCATTER:
    return b ? comm_reduce_scatter(c, recv, send, N, dt, op)
             : complete(comm_ireduce_scatter(c, recv, send, N, dt, op, &req), &req, mode);
  case COMM_K_ALLTOALL:
    return b ? comm_alltoall(c, recv, send, N, dt)
             : complete(comm_ialltoall(c, recv, send, N, dt, &req), &req, mode);
  case COMM_K_SEND: /* to oneself: a receive must be in flight with the send */
    if (b) {
      rc = comm_irecv(c, recv, N, dt, me, 5, &req);
      if (rc == STRATA_OK) rc = comm_send(c, send, N, dt, me, 5);
      int rc2 = comm_wait(&req);
      return rc ? rc : rc2;
    }
    rc = comm_isend(c, send, N, dt, me, 5, &req);
    if (rc == STRATA_OK) rc = comm_irecv(c, recv, N, dt, me, 5, &req2);
    if (rc == STRATA_OK) rc = complete(STRATA_OK, &req2, mode); /* the receive first */
    if (rc == STRATA_OK) rc = complete(STRATA_OK, &req, mode);
    return rc;
  default: return STRATA_EINVAL;
  }
}

/* Counters of kind k (and, for send, of recv) before and after a call. */
static void counters(comm_t *c, comm_kind_t k, comm_counter_t out[2]) {
  comm_counters(c, k, &out[0]);
  comm_counters(c, COMM_K_RECV, &out[1]);
}

static void compare(comm_t *c, comm_kind_t k, comm_dtype_t dt, comm_op_t op, int inplace, int mode) {
  /* (buffers of P blocks: what allgather, reduce_scatter and alltoall need) */
  const size_t es = comm_dtype_size(dt), P = (size_t)comm_size(c), bytes = N * es * P;
  unsigned char *h_in = malloc(bytes), *h_out = malloc(bytes), *in_back = malloc(bytes),
                *out_back = malloc(bytes), *d_in, *d_out;
  CK(cudaMalloc((void **)&d_in, bytes));
  CK(cudaMalloc((void **)&d_out, bytes));
  fill(h_in, dt, N * P, (int)k + 3 * (int)dt + comm_rank(c));
  memset(h_out, 0x5a, bytes); /* a sentinel where no result is due */
  CK(cudaMemcpy(d_in, h_in, bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_out, h_out, bytes, cudaMemcpyHostToDevice));
  /* in place: recv == send; allgather(v): send at this rank's block of
   * recv; broadcast is always in place */
  const int ip = inplace || k == COMM_K_BROADCAST;
  void *hr = ip ? h_in : h_out, *dr = ip ? d_in : d_out;
  size_t at = ip && (k == COMM_K_ALLGATHER || k == COMM_K_ALLGATHERV) ? (size_t)comm_rank(c) * N * es : 0;
  comm_counter_t h0[2], h1[2], d0[2], d1[2];
  counters(c, k, h0);
  int rh = run_op(c, k, hr, h_in + at, dt, op, mode);
  counters(c, k, h1);
  int rd = run_op(c, k, dr, d_in + at, dt, op, mode);
  counters(c, k, d1);
  memcpy(d0, h1, sizeof d0);
  char what[160];
  snprintf(what, sizeof what, "%s %s %s %s %s on '%s'", comm_kind_name(k), comm_dtype_name(dt),
           op_names[op], inplace ? "in place" : "out of place", mode_names[mode], comm_name(c));
  CHECK(rh == STRATA_OK, "%s: host path returned %d: %s", what, rh, comm_last_error(c));
  CHECK(rd == STRATA_OK, "%s: device path returned %d: %s", what, rd, comm_last_error(c));
  CK(cudaMemcpy(in_back, d_in, bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(out_back, d_out, bytes, cudaMemcpyDeviceToHost));
  if (rh == STRATA_OK && rd == STRATA_OK) {
    CHECK(!memcmp(in_back, h_in, bytes), "%s: device send buffer differs from host's", what);
    CHECK(!memcmp(out_back, h_out, bytes), "%s: device receive buffer differs from host's", what);
    for (int j = 0; j < (k == COMM_K_SEND ? 2 : 1); j++) {
      uint64_t hc = h1[j].calls - h0[j].calls, dc = d1[j].calls - d0[j].calls;
      uint64_t hs = h1[j].bytes_sent - h0[j].bytes_sent, ds = d1[j].bytes_sent - d0[j].bytes_sent;
      uint64_t hv = h1[j].bytes_recv - h0[j].bytes_recv, dv = d1[j].bytes_recv - d0[j].bytes_recv;
      CHECK(hc == 1 && dc == 1 && hs == ds && hv == dv,
            "%s: counters%s: host %llu calls %llu/%llu bytes, device %llu calls %llu/%llu bytes",
            what, j ? " (recv)" : "", (unsigned long long)hc, (unsigned long long)hs,
            (unsigned long long)hv, (unsigned long long)dc, (unsigned long long)ds,
            (unsigned long long)dv);
    }
    if (k == COMM_K_SEND)
      CHECK(d1[0].bytes_sent - d0[0].bytes_sent == bytes / P, "%s: %llu bytes sent counted, want %zu",
            what, (unsigned long long)(d1[0].bytes_sent - d0[0].bytes_sent), bytes / P);
  }
  CK(cudaFree(d_in));
  CK(cudaFree(d_out));
  free(h_in), free(h_out), free(in_back), free(out_back);
}

static void suite(comm_t *c) {
  static const comm_kind_t reducing[] = {COMM_K_ALLREDUCE, COMM_K_REDUCE, COMM_K_REDUCE_SCATTER};
  static const comm_kind_t moving[] = {COMM_K_BROADCAST, COMM_K_ALLGATHER, COMM_K_ALLGATHERV,
                                       COMM_K_ALLTOALL};
  for (int mode = 0; mode < NMODES; mode++)
    for (int dt = 0; dt < COMM_NDTYPES; dt++) {
      for (int ip = 0; ip < 2; ip++) {
        for (int k = 0; k < 3; k++)
          for (int op = 0; op < COMM_NOPS; op++)
            compare(c, reducing[k], (comm_dtype_t)dt, (comm_op_t)op, ip, mode);
        for (int k = 0; k < 4; k++) compare(c, moving[k], (comm_dtype_t)dt, COMM_SUM, ip, mode);
      }
      compare(c, COMM_K_SEND, (comm_dtype_t)dt, COMM_SUM, 0, mode);
    }
}

/* A device collective must read what the caller queued just before it on
 * the default stream (here an asynchronous memset of 256 MiB). */
static void stream_order(comm_t *c) {
  const size_t n = (size_t)256 << 20;
  unsigned char *d_in, *d_out, *h = malloc(n);
  CK(cudaMalloc((void **)&d_in, n));
  CK(cudaMalloc((void **)&d_out, n));
  CK(cudaMemset(d_in, 0, n));
  CK(cudaMemset(d_out, 0, n));
  CK(cudaDeviceSynchronize());
  for (int round = 1; round <= 3; round++) {
    CK(cudaMemsetAsync(d_in, round, n, 0));
    int rc = comm_allreduce(c, d_out, d_in, n, COMM_U8, COMM_SUM);
    CHECK(rc == STRATA_OK, "stream order: allreduce returned %d: %s", rc, comm_last_error(c));
    CK(cudaMemcpy(h, d_out, n, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != round;
    CHECK(bad == 0, "stream order: round %d: %zu of %zu bytes not yet written when NCCL read them",
          round, bad, n);
  }
  CK(cudaFree(d_in));
  CK(cudaFree(d_out));
  free(h);
}

int main(int argc, char **argv) {
  int ndev = 0, dev = -1, local = 0, ranks = 1;
  comm_t *world = NULL, *dup = NULL;
  /* MPI first, so a bundle's MPI runtime is checked anywhere; each rank's
   * GPU before libcomm's communicators, which decide on host staging from
   * the ranks' devices */
  MPI_Init(&argc, &argv);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (comm_local_device(MPI_COMM_WORLD, &dev, &local) == STRATA_OK && dev >= 0) cudaSetDevice(dev);
  if (comm_init(&world, NULL)) return 1;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    comm_destroy(world);
    MPI_Finalize();
    printf("gpu_comm_nccl: no CUDA device (%s): skipped\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  if (comm_dup(&dup, world)) {
    fprintf(stderr, "gpu_comm_nccl: comm_dup failed\n");
    return 1;
  }
  comm_set_name(dup, "dup-watched");
  /* the second communicator waits under the watchdog (device events polled) */
  if (comm_set_timeout(dup, 120.0, COMM_ON_TIMEOUT_ERROR)) return 1;

  /* one node here: ranks share a GPU exactly when there are more ranks than GPUs */
  int shared = ranks > ndev;
  CHECK(comm_is_staged(world) == shared && comm_is_staged(dup) == shared,
        "%d ranks on %d GPUs: host staging %d/%d, expected %d", ranks, ndev, comm_is_staged(world),
        comm_is_staged(dup), shared);
  if (comm_rank(world) == 0)
    printf("gpu_comm_nccl: %d rank%s on %d GPU%s: device buffers through %s\n", ranks, ranks > 1 ? "s" : "", ndev,
           ndev > 1 ? "s" : "", shared ? "host staging and MPI" : "NCCL");
  suite(world);
  suite(dup);
  stream_order(world);

  /* mixed host/device buffers are refused with a message */
  float *d, h[4] = {1, 2, 3, 4};
  CK(cudaMalloc((void **)&d, 16));
  int rc = comm_allreduce(world, h, d, 4, COMM_F32, COMM_SUM);
  CHECK(rc == STRATA_ESHAPE && strstr(comm_last_error(world), "send buffer is on the device"),
        "mixed buffers: rc %d '%s'", rc, comm_last_error(world));
  /* a host buffer probed by cudaPointerGetAttributes leaves no error behind */
  rc = comm_allreduce(world, h, h, 4, COMM_F32, COMM_SUM);
  CHECK(rc == STRATA_OK && cudaGetLastError() == cudaSuccess,
        "host allreduce after device ones: rc %d, CUDA last error pending", rc);
  CK(cudaFree(d));

  comm_destroy(dup);
  comm_destroy(world);
  MPI_Finalize();
  printf("gpu_comm_nccl: libcomm device path %s (%d failures)\n", failures ? "FAILED" : "ok",
         failures);
  return failures ? 1 : 0;
}
