// Device buffers through NCCL. One NCCL communicator per libcomm
// communicator, created on its first device operation (a collective call, so
// every rank creates it together): rank 0 makes the unique id and MPI
// broadcasts it. Operations run on the communicator's own stream; a CUDA
// event marks completion for wait/test.
#include "../internal.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct comm_nccl {
  ncclComm_t comm;
  cudaStream_t stream;
};

extern "C" int comm_nccl_device_count(void) {
  int n = 0; /* with no GPU the runtime returns an error and leaves n alone */
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

extern "C" int comm_nccl_is_device(const void *p) {
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

static ncclDataType_t nccl_dtype(comm_dtype_t dt) {
  switch (dt) {
  case COMM_F32: return ncclFloat32;
  case COMM_F64: return ncclFloat64;
  case COMM_F16: return ncclFloat16;
  case COMM_BF16: return ncclBfloat16;
  case COMM_I32: return ncclInt32;
  case COMM_I64: return ncclInt64;
  default: return ncclUint8;
  }
}

static ncclRedOp_t nccl_op(comm_op_t op) {
  return op == COMM_MAX ? ncclMax : op == COMM_MIN ? ncclMin : op == COMM_AVG ? ncclAvg : ncclSum;
}

#define NCHECK(call)                                                                               \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      snprintf(err, errlen, "NCCL %s on '%s': %s", #call, c->name, ncclGetErrorString(r_));       \
      rc = STRATA_ENCCL;                                                                           \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)
#define CCHECK(call)                                                                               \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      snprintf(err, errlen, "CUDA %s on '%s': %s", #call, c->name, cudaGetErrorString(e_));       \
      rc = STRATA_ECUDA;                                                                           \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

static int nccl_create(comm_t *c, char *err, size_t errlen) {
  int rc = STRATA_OK;
  ncclUniqueId id;
  struct comm_nccl *n = (struct comm_nccl *)calloc(1, sizeof *n);
  if (!n) return STRATA_ENOMEM;
  if (c->rank == 0) NCHECK(ncclGetUniqueId(&id));
  if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, c->mpi) != MPI_SUCCESS) {
    snprintf(err, errlen, "broadcasting the NCCL id on '%s' failed", c->name);
    rc = STRATA_EMPI;
    goto fail;
  }
  CCHECK(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
  NCHECK(ncclCommInitRank(&n->comm, c->size, id, c->rank));
  c->nccl = n;
  return STRATA_OK;
fail:
  if (n->stream) cudaStreamDestroy(n->stream);
  free(n);
  return rc;
}

extern "C" void comm_nccl_destroy(struct comm_nccl *n) {
  if (!n) return;
  ncclCommDestroy(n->comm);
  cudaStreamDestroy(n->stream);
  free(n);
}

extern "C" int comm_nccl_start(comm_t *c, comm_kind_t kind, void *recv, const void *send,
                               size_t count, comm_dtype_t dt, comm_op_t op, int root,
                               const size_t *counts, int peer, void **event, char *err,
                               size_t errlen) {
  int rc = STRATA_OK;
  cudaEvent_t ev = NULL;
  void *tmp = NULL;
  size_t es = comm_dtype_size(dt);
  ncclDataType_t t = nccl_dtype(dt);
  if (!c->nccl && (rc = nccl_create(c, err, errlen)) != STRATA_OK) return rc;
  {
    ncclComm_t nc = c->nccl->comm;
    cudaStream_t s = c->nccl->stream;
    char *r = (char *)recv;
    const char *sb = (const char *)send;
    switch (kind) {
    case COMM_K_ALLREDUCE: NCHECK(ncclAllReduce(send, recv, count, t, nccl_op(op), nc, s)); break;
    case COMM_K_REDUCE: NCHECK(ncclReduce(send, recv, count, t, nccl_op(op), root, nc, s)); break;
    case COMM_K_BROADCAST: NCHECK(ncclBroadcast(recv, recv, count, t, root, nc, s)); break;
    case COMM_K_ALLGATHER: NCHECK(ncclAllGather(send, recv, count, t, nc, s)); break;
    case COMM_K_ALLGATHERV: {
      size_t off = 0;
      NCHECK(ncclGroupStart());
      for (int i = 0; i < c->size; i++) {
        const void *src = i == c->rank ? send : r + off * es;
        NCHECK(ncclBroadcast(src, r + off * es, counts[i], t, i, nc, s));
        off += counts[i];
      }
      NCHECK(ncclGroupEnd());
    } break;
    case COMM_K_REDUCE_SCATTER:
      if (send == recv) { /* libcomm's in place keeps the result at the front; NCCL's does not */
        CCHECK(cudaMallocAsync(&tmp, count * es, s));
        NCHECK(ncclReduceScatter(send, tmp, count, t, nccl_op(op), nc, s));
        CCHECK(cudaMemcpyAsync(recv, tmp, count * es, cudaMemcpyDeviceToDevice, s));
      } else {
        NCHECK(ncclReduceScatter(send, recv, count, t, nccl_op(op), nc, s));
      }
      break;
    case COMM_K_ALLTOALL:
      if (send == recv) {
        CCHECK(cudaMallocAsync(&tmp, count * es * c->size, s));
        CCHECK(cudaMemcpyAsync(tmp, send, count * es * c->size, cudaMemcpyDeviceToDevice, s));
        sb = (const char *)tmp;
      }
      NCHECK(ncclGroupStart());
      for (int i = 0; i < c->size; i++) {
        NCHECK(ncclSend(sb + i * count * es, count, t, i, nc, s));
        NCHECK(ncclRecv(r + i * count * es, count, t, i, nc, s));
      }
      NCHECK(ncclGroupEnd());
      break;
    case COMM_K_SEND: NCHECK(ncclSend(send, count, t, peer, nc, s)); break;
    case COMM_K_RECV: NCHECK(ncclRecv(recv, count, t, peer, nc, s)); break;
    default:
      snprintf(err, errlen, "%s on '%s': not a device operation", comm_kind_name(kind), c->name);
      rc = STRATA_EUNSUPPORTED;
      goto fail;
    }
    if (tmp) CCHECK(cudaFreeAsync(tmp, s));
    tmp = NULL;
    CCHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CCHECK(cudaEventRecord(ev, s));
  }
  *event = ev;
  return STRATA_OK;
fail:
  if (ev) cudaEventDestroy(ev);
  if (tmp) cudaFree(tmp);
  return rc;
}

extern "C" int comm_nccl_query(void *event, int *done, char *err, size_t errlen) {
  cudaError_t e = cudaEventQuery((cudaEvent_t)event);
  *done = e == cudaSuccess;
  if (e == cudaSuccess || e == cudaErrorNotReady) return STRATA_OK;
  snprintf(err, errlen, "CUDA event query: %s", cudaGetErrorString(e));
  return STRATA_ECUDA;
}

// Polls the event so that the watchdog covers device operations too.
extern "C" int comm_nccl_event_wait(comm_t *c, void *event, comm_kind_t kind) {
  double end = MPI_Wtime() + c->cfg.timeout_s;
  for (long it = 0;; it++) {
    int done = 0, rc = comm_nccl_query(event, &done, c->err, sizeof c->err);
    if (rc != STRATA_OK || done) return rc;
    ncclResult_t async = ncclSuccess;
    if (c->nccl && ncclCommGetAsyncError(c->nccl->comm, &async) == ncclSuccess &&
        async != ncclSuccess && async != ncclInProgress)
      return comm_fail(c, STRATA_ENCCL, "NCCL %s on '%s': %s", comm_kind_name(kind), c->name,
                       ncclGetErrorString(async));
    comm_watch_serve(c);
    if (c->cfg.timeout_s > 0 && MPI_Wtime() > end) {
      ncclCommAbort(c->nccl->comm);
      c->nccl = NULL;
      c->failed = 1;
      return comm_fail(c, STRATA_ETIMEOUT,
                       "watchdog: device %s on communicator '%s' did not complete within %.3g s; "
                       "its NCCL communicator was aborted",
                       comm_kind_name(kind), c->name, c->cfg.timeout_s);
    }
    if (it > 1000) {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    }
  }
}

extern "C" void comm_nccl_event_free(void *event) {
  if (event) cudaEventDestroy((cudaEvent_t)event);
}
