// Device buffers through NCCL. One NCCL communicator per libcomm
// communicator, created on its first device operation (every rank of the
// communicator must make that call: rank 0 makes the unique id and MPI
// broadcasts it). Operations run on the communicator's own stream, after the
// work already queued on the legacy default stream (and so on every blocking
// stream); a CUDA event marks completion for wait/test. Sends and receives
// are posted in NCCL groups (see comm_nccl_p2p_flush).
#include "../internal.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct comm_nccl {
  ncclComm_t comm;
  cudaStream_t stream;
  cudaEvent_t ready; /* recorded on the legacy default stream before each operation */
};

extern "C" int comm_nccl_device_count(void) {
  int n = 0; /* with no GPU the runtime returns an error and leaves n alone */
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

extern "C" int comm_nccl_current_device(void) {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return d;
}

extern "C" int comm_nccl_host_alloc(void **p, size_t bytes) {
  *p = NULL;
  if (cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocDefault) == cudaSuccess) return 0;
  cudaGetLastError();
  *p = NULL;
  return -1;
}

extern "C" void comm_nccl_host_free(void *p) {
  if (p) cudaFreeHost(p);
}

extern "C" int comm_nccl_copy(void *dst, const void *src, size_t bytes, char *err, size_t errlen) {
  cudaError_t e = bytes ? cudaMemcpy(dst, src, bytes, cudaMemcpyDefault) : cudaSuccess;
  if (e == cudaSuccess) return 0;
  snprintf(err, errlen, "cudaMemcpy of %zu bytes (host staging): %s", bytes, cudaGetErrorString(e));
  cudaGetLastError();
  return -1;
}

extern "C" int comm_nccl_set_device(int device, char *err, size_t errlen) {
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) return 0;
  snprintf(err, errlen, "cudaSetDevice: %s", cudaGetErrorString(e));
  cudaGetLastError();
  return -1;
}

extern "C" int comm_nccl_is_device(const void *p) {
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError(); /* not sticky, but the next cudaGetLastError of the caller would see it */
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
  case COMM_U8: return ncclUint8;
  default: return ncclUint8; /* unreachable: check_args refused it */
  }
}

static ncclRedOp_t nccl_op(comm_op_t op) {
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 10, 0)
#error "libcomm needs NCCL 2.10 or later (ncclAvg)"
#endif
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

static void nccl_free(struct comm_nccl *n, int abort) {
  if (!n) return;
  if (n->comm) (abort ? ncclCommAbort : ncclCommDestroy)(n->comm);
  if (n->ready) cudaEventDestroy(n->ready);
  if (n->stream) cudaStreamDestroy(n->stream);
  free(n);
}

/* Collective over c. Every rank prepares its stream and event first and the
 * ranks agree that all succeeded before ncclCommInitRank (which would wait
 * forever for a rank that gave up). */
static int nccl_create(comm_t *c, char *err, size_t errlen) {
  int rc = STRATA_OK, ok = 0, all_ok = 0, mrc;
  struct {
    ncclUniqueId id;
    int status; /* rank 0's ncclGetUniqueId */
  } msg;
  memset(&msg, 0, sizeof msg);
  struct comm_nccl *n = (struct comm_nccl *)calloc(1, sizeof *n);
  if (c->rank == 0) msg.status = (int)ncclGetUniqueId(&msg.id);
  if (!n)
    snprintf(err, errlen, "NCCL communicator for '%s': out of memory", c->name);
  else if (cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking) != cudaSuccess ||
           cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming) != cudaSuccess)
    snprintf(err, errlen, "NCCL communicator for '%s': creating its CUDA stream: %s", c->name,
             cudaGetErrorString(cudaGetLastError()));
  else
    ok = 1;
  if ((mrc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, c->mpi)) != MPI_SUCCESS ||
      (mrc = MPI_Bcast(&msg, sizeof msg, MPI_BYTE, 0, c->mpi)) != MPI_SUCCESS) {
    snprintf(err, errlen, "creating the NCCL communicator of '%s': MPI error %d", c->name, mrc);
    rc = STRATA_EMPI;
    goto fail;
  }
  if (msg.status != (int)ncclSuccess) {
    snprintf(err, errlen, "NCCL ncclGetUniqueId on rank 0 of '%s': %s", c->name,
             ncclGetErrorString((ncclResult_t)msg.status));
    rc = STRATA_ENCCL;
    goto fail;
  }
  if (!all_ok) {
    if (ok)
      snprintf(err, errlen, "NCCL communicator for '%s': another rank failed to prepare", c->name);
    rc = n ? STRATA_ECUDA : STRATA_ENOMEM;
    goto fail;
  }
  NCHECK(ncclCommInitRank(&n->comm, c->size, msg.id, c->rank));
  c->nccl = n;
  return STRATA_OK;
fail:
  if (n) n->comm = NULL;
  nccl_free(n, 0);
  return rc;
}

extern "C" void comm_nccl_destroy(struct comm_nccl *n, int abort) { nccl_free(n, abort); }

/* Orders the next operation on c's stream after everything queued so far on
 * the legacy default stream, which itself waits for every blocking stream:
 * a buffer filled by a kernel, cudaMemset or cudaMemcpy the caller issued
 * before the call is complete when NCCL reads it. */
static int after_caller_work(comm_t *c, char *err, size_t errlen) {
  int rc = STRATA_OK;
  CCHECK(cudaEventRecord(c->nccl->ready, cudaStreamLegacy));
  CCHECK(cudaStreamWaitEvent(c->nccl->stream, c->nccl->ready, 0));
fail:
  return rc;
}

extern "C" int comm_nccl_start(comm_t *c, comm_kind_t kind, void *recv, const void *send,
                               size_t count, comm_dtype_t dt, comm_op_t op, int root,
                               const size_t *counts, int peer, void **event, char *err,
                               size_t errlen) {
  int rc = STRATA_OK, group = 0;
  cudaEvent_t ev = NULL;
  void *tmp = NULL;
  cudaStream_t s = NULL;
  size_t es = comm_dtype_size(dt);
  ncclDataType_t t = nccl_dtype(dt);
  (void)peer;
  if (!c->nccl && (rc = nccl_create(c, err, errlen)) != STRATA_OK) return rc;
  s = c->nccl->stream;
  if ((rc = after_caller_work(c, err, errlen)) != STRATA_OK) return rc;
  {
    ncclComm_t nc = c->nccl->comm;
    char *r = (char *)recv;
    const char *sb = (const char *)send;
    switch (kind) {
    case COMM_K_ALLREDUCE: NCHECK(ncclAllReduce(send, recv, count, t, nccl_op(op), nc, s)); break;
    case COMM_K_REDUCE: NCHECK(ncclReduce(send, recv, count, t, nccl_op(op), root, nc, s)); break;
    case COMM_K_BROADCAST: NCHECK(ncclBroadcast(recv, recv, count, t, root, nc, s)); break;
    case COMM_K_ALLGATHER: NCHECK(ncclAllGather(send, recv, count, t, nc, s)); break;
    case COMM_K_ALLGATHERV: {
      /* NCCL has no allgatherv: one broadcast per rank, fused in a group */
      size_t off = 0;
      NCHECK(ncclGroupStart());
      group = 1;
      for (int i = 0; i < c->size; i++) {
        const void *src = i == c->rank ? send : r + off * es;
        NCHECK(ncclBroadcast(src, r + off * es, counts[i], t, i, nc, s));
        off += counts[i];
      }
      group = 0;
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
      group = 1;
      for (int i = 0; i < c->size; i++) {
        NCHECK(ncclSend(sb + i * count * es, count, t, i, nc, s));
        NCHECK(ncclRecv(r + i * count * es, count, t, i, nc, s));
      }
      group = 0;
      NCHECK(ncclGroupEnd());
      break;
    default:
      snprintf(err, errlen, "%s on '%s': not a device collective", comm_kind_name(kind), c->name);
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
  if (group) ncclGroupEnd(); /* closes the group NCHECK left open; its error is already kept */
  if (ev) cudaEventDestroy(ev);
  if (tmp) cudaFreeAsync(tmp, s);
  return rc;
}

/* Posts c's queued device sends and receives (in call order) as one NCCL
 * group: a send and its receive must be in flight together (a send to self
 * cannot even be posted alone), and so must both directions of an exchange.
 * Each request then gets an event recorded after the group. */
extern "C" int comm_nccl_p2p_flush(comm_t *c) {
  int rc = STRATA_OK, group = 0;
  char *err = c->err;
  size_t errlen = sizeof c->err;
  comm_request_t *q = c->p2p_head, *r, *next;
  if (!q) return STRATA_OK;
  c->p2p_head = c->p2p_tail = NULL;
  if (!c->nccl && (rc = nccl_create(c, err, errlen)) != STRATA_OK) goto fail;
  if ((rc = after_caller_work(c, err, errlen)) != STRATA_OK) goto fail;
  {
    ncclComm_t nc = c->nccl->comm;
    cudaStream_t s = c->nccl->stream;
    NCHECK(ncclGroupStart());
    group = 1;
    for (r = q; r; r = r->p2p_next) {
      if (r->kind == COMM_K_SEND)
        NCHECK(ncclSend(r->p2p_buf, r->expect_count, nccl_dtype(r->dtype), r->peer, nc, s));
      else
        NCHECK(ncclRecv(r->p2p_buf, r->expect_count, nccl_dtype(r->dtype), r->peer, nc, s));
    }
    group = 0;
    NCHECK(ncclGroupEnd());
    for (r = q; r; r = r->p2p_next) {
      cudaEvent_t ev = NULL;
      CCHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      r->event = ev;
      CCHECK(cudaEventRecord(ev, s));
    }
  }
fail:
  if (group) ncclGroupEnd();
  for (r = q; r; r = next) {
    next = r->p2p_next;
    r->p2p_next = NULL;
    r->post_rc = rc;
  }
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
      nccl_free(c->nccl, 1);
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
