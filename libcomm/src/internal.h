/* libcomm internals shared by its source files. Not installed. */
#ifndef STRATA_COMM_INTERNAL_H
#define STRATA_COMM_INTERNAL_H

#include <stdarg.h>
#include <strata/comm.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COMM_ERRLEN 1024
#define COMM_REPLY_SLOTS 16

struct comm_nccl; /* src/cuda/nccl.cu, when built with CUDA */

struct comm {
  MPI_Comm mpi;  /* owned duplicate: every operation runs here */
  MPI_Comm side; /* owned duplicate: watchdog queries and replies only */
  int rank, size;
  char name[64];
  comm_config_t cfg;
  int failed;    /* a timed-out or mismatched operation left MPI state behind */
  uint64_t seq;  /* collectives started on this communicator */
  comm_counter_t counters[COMM_NKINDS];
  char err[COMM_ERRLEN];
  /* Watchdog state: what this rank is doing, for the replies it gives. */
  int busy_kind; /* kind in progress, -1 when outside libcomm */
  uint64_t busy_seq;
  uint64_t round; /* watchdog query rounds started by this rank */
  int64_t replies[COMM_REPLY_SLOTS][4];
  int reply_slot;
  int cuda_devices;        /* 0 when no GPU (device buffers impossible) */
  struct comm_nccl *nccl;  /* created on the first device collective */
  int staged;              /* two ranks share a GPU: device buffers go through host memory and MPI */
  /* Device sends and receives started but not yet handed to NCCL, in call
   * order: NCCL needs a send and its matching receive in one group (to self,
   * or both directions of an exchange), so non-blocking ones are posted
   * together, as one group, by the next wait, test or device operation on
   * this communicator. */
  struct comm_request *p2p_head, *p2p_tail;
};

/* The signature ranks agree on before a collective. */
typedef struct {
  int kind, dtype, op, root;
  uint64_t count; /* elements (for allgatherv: a hash of the counts array) */
  uint64_t seq;
} comm_sig_t;

struct comm_request {
  comm_t *c;
  comm_kind_t kind;
  comm_sig_t sig;
  MPI_Request mreq[2]; /* [0] the operation, [1] the argument check */
  int64_t check[2], check_in[2];
  int nreq;
  int on_device;   /* NCCL operation: completes through its CUDA event */
  void *event;     /* cudaEvent_t, when on_device (NULL: a send/recv not posted yet) */
  void *p2p_buf;   /* device send/recv: the buffer */
  struct comm_request *p2p_next; /* the communicator's queue of unposted device sends/recvs */
  int post_rc;     /* device send/recv: the status of posting its group (STRATA_OK) */
  int *counts;     /* allgatherv on MPI: int counts and displacements (owned) */
  double t0;
  uint64_t sent, recvd;
  /* AVG needs a division after the sum completes */
  void *avg_buf;
  size_t avg_count;
  comm_dtype_t avg_dtype;
  /* recv: the expected count and dtype, checked against the status */
  size_t expect_count;
  comm_dtype_t dtype;
  int peer, tag;
  /* host staging (c->staged): the pinned host buffers the MPI operation
   * runs on, and where its result goes back to on the device */
  void *stage_send, *stage_recv, *stage_dev;
  size_t stage_bytes;
};

/* Formats the last error of c; returns code (so `return comm_fail(c, ...)`). */
int comm_fail(comm_t *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Translates an MPI error code into STRATA_EMPI with MPI's own message. */
int comm_fail_mpi(comm_t *c, int mpi_rc, const char *what);

/* dtype.c */
MPI_Datatype comm_mpi_dtype(comm_dtype_t dt);
int comm_mpi_op(comm_dtype_t dt, comm_op_t op, MPI_Op *out);
int comm_dtype_valid(comm_dtype_t dt);
void comm_divide(void *buf, size_t count, comm_dtype_t dt, int n);
int comm_types_init(void);

/* watchdog.c */
/* Waits for nreq MPI requests, polling, answering watchdog queries and
 * reporting after the timeout (STRATA_ETIMEOUT, or MPI_Abort). *st0 gets the
 * status of reqs[0] and *mpi_rc the first MPI error (MPI_SUCCESS if none);
 * both may be NULL. */
int comm_watch_wait(comm_t *c, int nreq, MPI_Request *reqs, MPI_Status *st0, int *mpi_rc,
                    comm_kind_t kind, uint64_t seq);
/* Answers pending watchdog queries (never blocks). */
void comm_watch_serve(comm_t *c);

/* counters */
void comm_count(comm_t *c, comm_kind_t kind, uint64_t sent, uint64_t recvd, double seconds);

/* NCCL (src/cuda/nccl.cu); only with STRATA_CUDA. */
#ifdef STRATA_CUDA
int comm_nccl_device_count(void);
/* The calling thread's current CUDA device (-1 when it cannot be read). */
int comm_nccl_current_device(void);
/* Pinned host memory for staging, and copies between any two places
 * (cudaMemcpy, in order with the legacy default stream's work). */
int comm_nccl_host_alloc(void **p, size_t bytes);
void comm_nccl_host_free(void *p);
int comm_nccl_copy(void *dst, const void *src, size_t bytes, char *err, size_t errlen);
int comm_nccl_is_device(const void *p);
/* cudaSetDevice; 0 or the runtime's message in err. */
int comm_nccl_set_device(int device, char *err, size_t errlen);
int comm_nccl_start(comm_t *c, comm_kind_t kind, void *recv, const void *send, size_t count,
                    comm_dtype_t dt, comm_op_t op, int root, const size_t *counts, int peer,
                    void **event, char *err, size_t errlen);
/* Posts the queued device sends and receives of c as one NCCL group and
 * gives each its completion event; empties the queue. On failure every
 * queued request gets post_rc = the status (c->err says why). */
int comm_nccl_p2p_flush(comm_t *c);
int comm_nccl_query(void *event, int *done, char *err, size_t errlen);
int comm_nccl_event_wait(comm_t *c, void *event, comm_kind_t kind);
void comm_nccl_event_free(void *event);
void comm_nccl_destroy(struct comm_nccl *n, int abort);
#endif

#ifdef __cplusplus
}
#endif
#endif
