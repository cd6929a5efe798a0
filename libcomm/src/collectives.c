/* Collectives and point-to-point: one path for all of them.
 *
 * start() validates the arguments, agrees on them across ranks (one 16-byte
 * allreduce of a signature hash, when check_args), posts the MPI or NCCL
 * operation and returns a request; finish() completes it under the watchdog,
 * applies AVG, checks receive lengths and updates the counters. Blocking
 * calls are start + finish, except the fast path: without watchdog they call
 * MPI's blocking collectives directly, which Open MPI tunes better than the
 * non-blocking ones. */
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  comm_kind_t kind;
  void *recv;
  const void *send;
  size_t count;
  comm_dtype_t dt;
  comm_op_t op;
  int root;
  const size_t *counts; /* allgatherv */
  int peer, tag;
} op_args_t;

static int is_collective(comm_kind_t k) { return k != COMM_K_SEND && k != COMM_K_RECV; }
static int has_op(comm_kind_t k) {
  return k == COMM_K_ALLREDUCE || k == COMM_K_REDUCE || k == COMM_K_REDUCE_SCATTER;
}
static int has_root(comm_kind_t k) { return k == COMM_K_REDUCE || k == COMM_K_BROADCAST; }

static const char *op_name(comm_op_t op) {
  static const char *const names[] = {"sum", "max", "min", "avg"};
  return (unsigned)op < COMM_NOPS ? names[op] : "unknown";
}

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t sig_hash(const comm_sig_t *s) {
  uint64_t h = mix64((uint64_t)s->kind + 1);
  h = mix64(h ^ ((uint64_t)s->dtype << 8) ^ ((uint64_t)s->op << 16) ^ ((uint64_t)(s->root + 1) << 24));
  h = mix64(h ^ s->count);
  return mix64(h ^ s->seq);
}

static void sig_format(char *buf, size_t n, const comm_sig_t *s) {
  int k = snprintf(buf, n, "%s #%llu", comm_kind_name((comm_kind_t)s->kind),
                   (unsigned long long)s->seq);
  if (k < 0 || (size_t)k >= n) return;
  if (s->kind == COMM_K_BARRIER) return;
  if (s->kind == COMM_K_ALLGATHERV)
    k += snprintf(buf + k, n - k, " counts-hash=%016llx", (unsigned long long)s->count);
  else
    k += snprintf(buf + k, n - k, " count=%llu", (unsigned long long)s->count);
  if ((size_t)k >= n) return;
  k += snprintf(buf + k, n - k, " %s", comm_dtype_name((comm_dtype_t)s->dtype));
  if ((size_t)k < n && has_op((comm_kind_t)s->kind))
    k += snprintf(buf + k, n - k, " %s", op_name((comm_op_t)s->op));
  if ((size_t)k < n && has_root((comm_kind_t)s->kind)) snprintf(buf + k, n - k, " root=%d", s->root);
}

/* ---- validation --------------------------------------------------------- */

static int check_args(comm_t *c, const op_args_t *a) {
  const char *what = comm_kind_name(a->kind);
  if (c->failed)
    return comm_fail(c, STRATA_ESTATE,
                     "%s on communicator '%s': the communicator failed earlier and cannot be used",
                     what, c->name);
  if (!comm_dtype_valid(a->dt) && a->kind != COMM_K_BARRIER)
    return comm_fail(c, STRATA_EINVAL, "%s on '%s': unknown dtype %d (valid: 0..%d)", what, c->name,
                     (int)a->dt, COMM_NDTYPES - 1);
  if (has_op(a->kind) && (unsigned)a->op >= COMM_NOPS)
    return comm_fail(c, STRATA_EINVAL, "%s on '%s': unknown reduction op %d (valid: 0..%d)", what,
                     c->name, (int)a->op, COMM_NOPS - 1);
  if (has_root(a->kind) && (a->root < 0 || a->root >= c->size))
    return comm_fail(c, STRATA_EINVAL, "%s on '%s': root %d out of range [0, %d)", what, c->name,
                     a->root, c->size);
  if (!is_collective(a->kind)) {
    if (a->peer < 0 || a->peer >= c->size)
      return comm_fail(c, STRATA_EINVAL, "%s on '%s': peer rank %d out of range [0, %d)", what,
                       c->name, a->peer, c->size);
    if (a->tag < 0)
      return comm_fail(c, STRATA_EINVAL, "%s on '%s': tag %d is negative", what, c->name, a->tag);
  }
  size_t total = a->count; /* largest count handed to MPI in one argument */
  if (a->kind == COMM_K_ALLGATHER || a->kind == COMM_K_REDUCE_SCATTER || a->kind == COMM_K_ALLTOALL)
    total = a->count * (size_t)c->size;
  if (a->kind == COMM_K_ALLGATHERV) {
    if (!a->counts)
      return comm_fail(c, STRATA_EINVAL, "allgatherv on '%s': counts is NULL", c->name);
    total = 0;
    for (int r = 0; r < c->size; r++) total += a->counts[r];
  }
  if (total > (size_t)INT_MAX)
    return comm_fail(c, STRATA_EINVAL, "%s on '%s': %zu elements exceed the MPI limit of %d per call",
                     what, c->name, total, INT_MAX);
  if (a->kind == COMM_K_BARRIER || total == 0) return STRATA_OK;
  int need_send = a->kind != COMM_K_BROADCAST && a->kind != COMM_K_RECV;
  int need_recv = a->kind != COMM_K_SEND && (a->kind != COMM_K_REDUCE || c->rank == a->root);
  if (a->kind == COMM_K_ALLGATHERV && a->counts[c->rank] == 0) need_send = 0;
  if ((need_send && !a->send) || (need_recv && !a->recv))
    return comm_fail(c, STRATA_EINVAL, "%s on '%s': %s buffer is NULL with count %zu", what, c->name,
                     (need_send && !a->send) ? "send" : "receive", a->count);
  return STRATA_OK;
}

/* Bytes this rank moves, per the ring formulas in comm.h. */
static void traffic(const comm_t *c, const op_args_t *a, uint64_t *sent, uint64_t *recvd) {
  uint64_t n = (uint64_t)c->size, es = comm_dtype_size(a->dt), B = (uint64_t)a->count * es;
  *sent = *recvd = 0;
  switch (a->kind) {
  case COMM_K_ALLREDUCE: *sent = *recvd = 2 * (n - 1) * B / n; break;
  case COMM_K_REDUCE_SCATTER:
  case COMM_K_ALLGATHER:
  case COMM_K_ALLTOALL: *sent = *recvd = (n - 1) * B; break; /* B is one block: whole = n B */
  case COMM_K_ALLGATHERV: {
    uint64_t whole = 0;
    for (int r = 0; r < c->size; r++) whole += a->counts[r];
    *recvd = (whole - a->counts[c->rank]) * es;
    *sent = (whole - a->counts[(c->rank + 1) % c->size]) * es;
  } break;
  case COMM_K_REDUCE:
    if (n == 1) break;
    *sent = (n - 1) * B / n + (c->rank == a->root ? 0 : B / n);
    *recvd = (n - 1) * B / n + (c->rank == a->root ? (n - 1) * B / n : 0);
    break;
  case COMM_K_BROADCAST:
    if (n == 1) break;
    if (c->rank == a->root) *sent = B;
    else *recvd = B;
    break;
  case COMM_K_SEND: *sent = B; break;
  case COMM_K_RECV: *recvd = B; break;
  default: break;
  }
}

/* ---- the argument check ------------------------------------------------- */

/* After the check allreduce: on disagreement, every rank learns every rank's
 * signature (all ranks see max != min, so all take this path together). */
static int report_mismatch(comm_t *c, comm_request_t *r) {
  comm_sig_t *all = malloc(sizeof(comm_sig_t) * (size_t)c->size);
  if (!all) return comm_fail(c, STRATA_ENOMEM, "argument check: out of memory");
  int mrc = MPI_Allgather(&r->sig, sizeof(comm_sig_t), MPI_BYTE, all, sizeof(comm_sig_t), MPI_BYTE,
                          c->side);
  if (mrc != MPI_SUCCESS) {
    free(all);
    return comm_fail_mpi(c, mrc, "argument check");
  }
  size_t k = (size_t)snprintf(c->err, sizeof c->err,
                              "mismatched collective on communicator '%s': ranks disagree:", c->name);
  for (int i = 0; i < c->size && k < sizeof c->err; i++) {
    char one[160];
    sig_format(one, sizeof one, &all[i]);
    k += (size_t)snprintf(c->err + k, sizeof c->err - k, "%s rank %d: %s", i ? ";" : "", i, one);
  }
  free(all);
  return STRATA_EINVAL;
}

/* ---- posting operations ------------------------------------------------- */

static int recv_length_check(comm_t *c, int mrc, const MPI_Status *st, size_t expect,
                             comm_dtype_t dt, int peer, int tag);

/* The send argument MPI gets: MPI_IN_PLACE where libcomm's in-place
 * convention applies (recv == send; for allgather(v), send already sitting
 * at this rank's block of recv), else send itself. */
static const void *mpi_send_arg(const comm_t *c, const op_args_t *a, size_t displ) {
  size_t es = comm_dtype_size(a->dt);
  switch (a->kind) {
  case COMM_K_ALLREDUCE:
  case COMM_K_REDUCE_SCATTER:
  case COMM_K_ALLTOALL: return a->send == a->recv ? MPI_IN_PLACE : a->send;
  case COMM_K_REDUCE:
    return c->rank == a->root && a->send == a->recv ? MPI_IN_PLACE : a->send;
  case COMM_K_ALLGATHER:
  case COMM_K_ALLGATHERV:
    return a->send == (const char *)a->recv + displ * es ? MPI_IN_PLACE : a->send;
  default: return a->send;
  }
}

static int post_mpi(comm_t *c, comm_request_t *r, const op_args_t *a) {
  MPI_Datatype dt = comm_mpi_dtype(a->dt);
  MPI_Op op = MPI_OP_NULL;
  int n = (int)a->count, mrc = MPI_SUCCESS;
  const void *send = mpi_send_arg(c, a, (size_t)c->rank * a->count);
  MPI_Request *q = &r->mreq[0];
  if (has_op(a->kind)) comm_mpi_op(a->dt, a->op == COMM_AVG ? COMM_SUM : a->op, &op);
  switch (a->kind) {
  case COMM_K_ALLREDUCE: mrc = MPI_Iallreduce(send, a->recv, n, dt, op, c->mpi, q); break;
  case COMM_K_REDUCE:
    mrc = MPI_Ireduce(send, c->rank == a->root ? a->recv : NULL, n, dt, op, a->root, c->mpi, q);
    break;
  case COMM_K_BROADCAST: mrc = MPI_Ibcast(a->recv, n, dt, a->root, c->mpi, q); break;
  case COMM_K_ALLGATHER: mrc = MPI_Iallgather(send, n, dt, a->recv, n, dt, c->mpi, q); break;
  case COMM_K_ALLGATHERV: {
    /* MPI wants int counts and displacements that live until completion */
    int *cv = malloc(sizeof(int) * 2 * (size_t)c->size);
    if (!cv) return comm_fail(c, STRATA_ENOMEM, "allgatherv: out of memory");
    size_t off = 0;
    for (int i = 0; i < c->size; i++) {
      cv[i] = (int)a->counts[i];
      cv[c->size + i] = (int)off;
      off += a->counts[i];
    }
    r->counts = cv;
    send = mpi_send_arg(c, a, (size_t)cv[c->size + c->rank]);
    mrc = MPI_Iallgatherv(send, cv[c->rank], dt, a->recv, cv, cv + c->size, dt, c->mpi, q);
  } break;
  case COMM_K_REDUCE_SCATTER:
    mrc = MPI_Ireduce_scatter_block(send, a->recv, n, dt, op, c->mpi, q);
    break;
  case COMM_K_ALLTOALL: mrc = MPI_Ialltoall(send, n, dt, a->recv, n, dt, c->mpi, q); break;
  case COMM_K_SEND: mrc = MPI_Isend(send, n, dt, a->peer, a->tag, c->mpi, q); break;
  case COMM_K_RECV: mrc = MPI_Irecv(a->recv, n, dt, a->peer, a->tag, c->mpi, q); break;
  case COMM_K_BARRIER: mrc = MPI_Ibarrier(c->mpi, q); break;
  default: return comm_fail(c, STRATA_EINVAL, "unknown operation kind %d", (int)a->kind);
  }
  if (mrc != MPI_SUCCESS) return comm_fail_mpi(c, mrc, comm_kind_name(a->kind));
  r->nreq = 1;
  return STRATA_OK;
}

/* The blocking fast path (no watchdog): MPI's blocking collectives. Returns
 * MPI's own code. */
static int run_mpi_blocking(comm_t *c, const op_args_t *a, MPI_Status *st) {
  MPI_Datatype dt = comm_mpi_dtype(a->dt);
  MPI_Op op = MPI_OP_NULL;
  int n = (int)a->count;
  const void *send = mpi_send_arg(c, a, (size_t)c->rank * a->count);
  if (has_op(a->kind)) comm_mpi_op(a->dt, a->op == COMM_AVG ? COMM_SUM : a->op, &op);
  switch (a->kind) {
  case COMM_K_ALLREDUCE: return MPI_Allreduce(send, a->recv, n, dt, op, c->mpi);
  case COMM_K_REDUCE:
    return MPI_Reduce(send, c->rank == a->root ? a->recv : NULL, n, dt, op, a->root, c->mpi);
  case COMM_K_BROADCAST: return MPI_Bcast(a->recv, n, dt, a->root, c->mpi);
  case COMM_K_ALLGATHER: return MPI_Allgather(send, n, dt, a->recv, n, dt, c->mpi);
  case COMM_K_REDUCE_SCATTER: return MPI_Reduce_scatter_block(send, a->recv, n, dt, op, c->mpi);
  case COMM_K_ALLTOALL: return MPI_Alltoall(send, n, dt, a->recv, n, dt, c->mpi);
  case COMM_K_SEND: return MPI_Send(send, n, dt, a->peer, a->tag, c->mpi);
  case COMM_K_RECV: return MPI_Recv(a->recv, n, dt, a->peer, a->tag, c->mpi, st);
  case COMM_K_BARRIER: return MPI_Barrier(c->mpi);
  default: return MPI_ERR_OP; /* allgatherv goes through the request path */
  }
}

/* Turns the MPI code of a finished operation into a status. */
static int mpi_outcome(comm_t *c, comm_kind_t kind, int mrc, const MPI_Status *st, size_t count,
                       comm_dtype_t dt, int peer, int tag) {
  if (kind == COMM_K_RECV) return recv_length_check(c, mrc, st, count, dt, peer, tag);
  return mrc == MPI_SUCCESS ? STRATA_OK : comm_fail_mpi(c, mrc, comm_kind_name(kind));
}

static int recv_length_check(comm_t *c, int mrc, const MPI_Status *st, size_t expect,
                             comm_dtype_t dt, int peer, int tag) {
  int got = 0, cls = 0;
  if (mrc != MPI_SUCCESS) MPI_Error_class(mrc, &cls);
  if (mrc != MPI_SUCCESS && cls == MPI_ERR_TRUNCATE)
    return comm_fail(c, STRATA_EINVAL,
                     "recv from rank %d tag %d on '%s': the message is longer than the %zu %s "
                     "expected",
                     peer, tag, c->name, expect, comm_dtype_name(dt));
  if (mrc != MPI_SUCCESS) return comm_fail_mpi(c, mrc, "recv");
  MPI_Get_count(st, comm_mpi_dtype(dt), &got);
  if ((size_t)got != expect)
    return comm_fail(c, STRATA_EINVAL, "recv from rank %d tag %d on '%s': expected %zu %s, got %d",
                     peer, tag, c->name, expect, comm_dtype_name(dt), got);
  return STRATA_OK;
}

static int device_side(comm_t *c, const op_args_t *a, int *on_device) {
  *on_device = 0;
#ifdef STRATA_CUDA
  if (c->cuda_devices > 0 && a->kind != COMM_K_BARRIER) {
    int ds = a->send ? comm_nccl_is_device(a->send) : -1;
    int dr = a->recv ? comm_nccl_is_device(a->recv) : -1;
    if (ds >= 0 && dr >= 0 && ds != dr)
      return comm_fail(c, STRATA_ESHAPE, "%s on '%s': send buffer is on the %s, receive on the %s",
                       comm_kind_name(a->kind), c->name, ds ? "device" : "host",
                       dr ? "device" : "host");
    *on_device = ds > 0 || dr > 0;
  }
#else
  (void)c, (void)a;
#endif
  return STRATA_OK;
}

#ifdef STRATA_CUDA
/* Bytes of a's send and receive buffers (this rank's). */
static void op_bytes(const comm_t *c, const op_args_t *a, size_t *sb, size_t *rb) {
  size_t es = comm_dtype_size(a->dt), n = a->count * es, p = (size_t)c->size, all = 0;
  *sb = *rb = 0;
  switch (a->kind) {
  case COMM_K_ALLREDUCE:
  case COMM_K_REDUCE: *sb = *rb = n; break;
  case COMM_K_BROADCAST: *rb = n; break;
  case COMM_K_ALLGATHER: *sb = n, *rb = n * p; break;
  case COMM_K_ALLGATHERV:
    for (int i = 0; i < c->size; i++) all += a->counts[i];
    *sb = a->counts[c->rank] * es, *rb = all * es;
    break;
  case COMM_K_REDUCE_SCATTER: *sb = n * p, *rb = n; break;
  case COMM_K_ALLTOALL: *sb = *rb = n * p; break;
  case COMM_K_SEND: *sb = n; break;
  case COMM_K_RECV: *rb = n; break;
  default: break;
  }
  if (a->kind == COMM_K_REDUCE && c->rank != a->root) *rb = 0; /* (its receive buffer is left alone) */
}

/* Host staging of a device operation on a communicator whose ranks share a
 * GPU (c->staged): *h, the same operation on pinned host buffers that keep
 * the relation of a's (a send inside the receive buffer stays inside it, so
 * that the in-place forms stay in place), filled from the device (cudaMemcpy,
 * after the work queued before on the legacy stream); finish() copies the
 * result back. */
static int stage_in(comm_t *c, const op_args_t *a, comm_request_t *r, op_args_t *h) {
  static int told; /* the notice, once per process (process state, as MPI's initialisation) */
  size_t sb, rb;
  op_bytes(c, a, &sb, &rb);
  const char *s = a->send, *d = a->recv;
  int inside = s && d && s >= d && s + sb <= d + rb; /* (in place) */
  *h = *a;
  if (comm_nccl_host_alloc(&r->stage_recv, rb + (inside ? 0 : sb)))
    return comm_fail(c, STRATA_ENOMEM, "%s on '%s': no pinned host memory for %zu bytes of staging",
                     comm_kind_name(a->kind), c->name, rb + sb);
  r->stage_send = inside ? (char *)r->stage_recv + (s - d) : (char *)r->stage_recv + rb;
  h->recv = a->recv ? r->stage_recv : NULL;
  h->send = a->send ? r->stage_send : NULL;
  /* what the operation reads: the send buffer; in place or a broadcast's root, the receive buffer */
  int whole = inside || (a->kind == COMM_K_BROADCAST && c->rank == a->root);
  if (whole ? comm_nccl_copy(r->stage_recv, d, rb, c->err, sizeof c->err)
            : s && comm_nccl_copy(r->stage_send, s, sb, c->err, sizeof c->err))
    return STRATA_ECUDA;
  if (a->recv && a->kind != COMM_K_SEND) r->stage_dev = a->recv, r->stage_bytes = rb;
  if (r->avg_buf) r->avg_buf = r->stage_recv; /* (MPI's sum, divided on the host before the copy back) */
  if (!told && c->rank == 0)
    fprintf(stderr, "strata: libcomm: ranks of communicator '%s' share a GPU, which NCCL refuses: its device "
            "buffers go through host memory and MPI (slower; one GPU per rank avoids it)\n", c->name);
  told = 1;
  return STRATA_OK;
}
#endif

/* Validates and posts; for a blocking call without watchdog, also runs it
 * (*done = 1). The caller owns *out and passes it to finish(). */
static int start(comm_t *c, const op_args_t *a, int blocking, comm_request_t **out, int *done) {
  int rc, on_device = 0;
  comm_request_t *r = NULL;
  *out = NULL;
  *done = 0;
  if (!c) return STRATA_EINVAL;
  c->err[0] = 0;
  if ((rc = check_args(c, a)) != STRATA_OK) return rc;
  if ((rc = device_side(c, a, &on_device)) != STRATA_OK) return rc;
  if (!(r = calloc(1, sizeof *r))) return comm_fail(c, STRATA_ENOMEM, "out of memory");
  r->c = c;
  r->kind = a->kind;
  r->t0 = MPI_Wtime();
  r->peer = a->peer;
  r->tag = a->tag;
  r->expect_count = a->count;
  r->dtype = a->dt;
  r->mreq[0] = r->mreq[1] = MPI_REQUEST_NULL;
  traffic(c, a, &r->sent, &r->recvd);
  if (has_op(a->kind) && a->op == COMM_AVG && (a->kind != COMM_K_REDUCE || c->rank == a->root)) {
    r->avg_buf = a->recv;
    r->avg_count = a->count;
    r->avg_dtype = a->dt;
  }
  int watch = c->cfg.timeout_s > 0;
  if (is_collective(a->kind)) {
    r->sig = (comm_sig_t){.kind = a->kind, .dtype = a->kind == COMM_K_BARRIER ? 0 : (int)a->dt,
                          .op = has_op(a->kind) ? (int)a->op : 0,
                          .root = has_root(a->kind) ? a->root : -1, .count = a->count,
                          .seq = c->seq++};
    if (a->kind == COMM_K_ALLGATHERV) {
      uint64_t h = 0;
      for (int i = 0; i < c->size; i++) h = mix64(h ^ a->counts[i]);
      r->sig.count = h;
    }
    if (a->kind == COMM_K_BARRIER) r->sig.count = 0;
    if (c->cfg.check_args) {
      int64_t h = (int64_t)(sig_hash(&r->sig) >> 1);
      r->check[0] = h;
      r->check[1] = -h;
      int mrc;
      if (blocking) {
        /* Agree before posting: a mismatch then leaves the communicator usable. */
        c->busy_kind = a->kind;
        c->busy_seq = r->sig.seq;
        if (watch) {
          mrc = MPI_Iallreduce(r->check, r->check_in, 2, MPI_INT64_T, MPI_MAX, c->side, &r->mreq[1]);
          if (mrc == MPI_SUCCESS)
            rc = comm_watch_wait(c, 1, &r->mreq[1], NULL, &mrc, a->kind, r->sig.seq);
          if (rc == STRATA_OK && mrc != MPI_SUCCESS) rc = comm_fail_mpi(c, mrc, "argument check");
        } else {
          mrc = MPI_Allreduce(r->check, r->check_in, 2, MPI_INT64_T, MPI_MAX, c->side);
          rc = mrc == MPI_SUCCESS ? STRATA_OK : comm_fail_mpi(c, mrc, "argument check");
        }
        c->busy_kind = -1;
        if (rc == STRATA_ETIMEOUT) c->failed = 1; /* the check request stays pending in MPI */
        if (rc != STRATA_OK) goto fail;
        if (r->check_in[0] != h || -r->check_in[1] != h) {
          rc = report_mismatch(c, r);
          goto fail;
        }
      } else {
        mrc = MPI_Iallreduce(r->check, r->check_in, 2, MPI_INT64_T, MPI_MAX, c->side, &r->mreq[1]);
        if (mrc != MPI_SUCCESS) {
          rc = comm_fail_mpi(c, mrc, "argument check");
          goto fail;
        }
      }
    }
  }
  if (on_device && c->staged) {
#ifdef STRATA_CUDA
    op_args_t h;
    if ((rc = stage_in(c, a, r, &h)) != STRATA_OK || (rc = post_mpi(c, r, &h)) != STRATA_OK) goto fail;
#endif
  } else if (on_device && !is_collective(a->kind)) {
#ifdef STRATA_CUDA
    /* Queued, and posted with the other queued sends and receives of c as one
     * NCCL group: now when blocking, else by the next wait, test or device
     * operation on c. A failure to post reaches finish() through post_rc. */
    r->on_device = 1;
    r->p2p_buf = a->kind == COMM_K_SEND ? (void *)a->send : a->recv;
    if (c->p2p_tail)
      c->p2p_tail->p2p_next = r;
    else
      c->p2p_head = r;
    c->p2p_tail = r;
    if (blocking) comm_nccl_p2p_flush(c);
#endif
  } else if (on_device) {
#ifdef STRATA_CUDA
    /* queued sends and receives go first: NCCL needs every rank's operations
     * on a communicator in the same order */
    if ((rc = comm_nccl_p2p_flush(c)) != STRATA_OK) goto fail;
    rc = comm_nccl_start(c, a->kind, a->recv, a->send, a->count, a->dt, a->op, a->root, a->counts,
                         a->peer, &r->event, c->err, sizeof c->err);
    if (rc != STRATA_OK) goto fail;
    r->on_device = 1;
    r->avg_buf = NULL; /* NCCL averages natively */
#endif
  } else if (blocking && !watch && a->kind != COMM_K_ALLGATHERV) {
    MPI_Status st;
    int mrc = run_mpi_blocking(c, a, &st);
    rc = mpi_outcome(c, a->kind, mrc, &st, a->count, a->dt, a->peer, a->tag);
    if (rc != STRATA_OK) goto fail;
    *done = 1;
  } else {
    if ((rc = post_mpi(c, r, a)) != STRATA_OK) goto fail;
  }
  *out = r;
  return STRATA_OK;
fail:
  if (r) {
    /* A posted argument check writes into r until it completes: wait for it
     * (the other ranks post theirs in any collective), unless it timed out,
     * which failed c; then r stays allocated for MPI to write into. */
    if (r->mreq[1] != MPI_REQUEST_NULL) {
      if (c->failed) return rc;
      MPI_Wait(&r->mreq[1], MPI_STATUS_IGNORE);
    }
    free(r->counts);
#ifdef STRATA_CUDA
    comm_nccl_host_free(r->stage_recv);
#endif
  }
  free(r);
  return rc;
}

static void request_free(comm_request_t *r) {
#ifdef STRATA_CUDA
  if (r->on_device) comm_nccl_event_free(r->event);
  comm_nccl_host_free(r->stage_recv);
#endif
  free(r->counts);
  free(r);
}

/* Completes r (already complete when `done`), then frees it. */
static int finish(comm_request_t *r, int done) {
  comm_t *c = r->c;
  int rc = STRATA_OK;
  int check_pending = r->mreq[1] != MPI_REQUEST_NULL;
  if (!done) {
    MPI_Status st;
    int mrc = MPI_SUCCESS;
    memset(&st, 0, sizeof st);
    c->busy_kind = r->kind;
    c->busy_seq = r->sig.seq;
    if (r->on_device) {
#ifdef STRATA_CUDA
      if (!r->event && r->post_rc == STRATA_OK) comm_nccl_p2p_flush(c); /* a queued send/recv */
      rc = r->post_rc;
      if (rc == STRATA_OK && check_pending)
        rc = comm_watch_wait(c, 1, &r->mreq[1], NULL, &mrc, r->kind, r->sig.seq);
      if (rc == STRATA_OK && mrc != MPI_SUCCESS) rc = comm_fail_mpi(c, mrc, "argument check");
      /* a mismatch is reported before waiting: mismatched NCCL operations may never finish */
      if (rc == STRATA_OK && check_pending &&
          (r->check_in[0] != r->check[0] || r->check_in[1] != r->check[1])) {
        rc = report_mismatch(c, r);
        c->failed = 1;
      }
      if (rc == STRATA_OK) rc = comm_nccl_event_wait(c, r->event, r->kind);
#endif
    } else if (c->cfg.timeout_s > 0) {
      rc = comm_watch_wait(c, 2, r->mreq, &st, &mrc, r->kind, r->sig.seq);
    } else {
      mrc = MPI_Wait(&r->mreq[0], &st);
      int m2 = MPI_Wait(&r->mreq[1], MPI_STATUS_IGNORE);
      if (mrc == MPI_SUCCESS) mrc = m2;
    }
    c->busy_kind = -1;
    /* (NCCL receives exactly count elements: no status to check on the device) */
    if (rc == STRATA_OK && !r->on_device)
      rc = mpi_outcome(c, r->kind, mrc, &st, r->expect_count, r->dtype, r->peer, r->tag);
    if (rc == STRATA_OK && check_pending &&
        (r->check_in[0] != r->check[0] || r->check_in[1] != r->check[1])) {
      rc = report_mismatch(c, r);
      c->failed = 1; /* the operation itself ran with disagreeing arguments */
    }
    if (rc == STRATA_ETIMEOUT) {
      c->failed = 1;
      /* MPI may still write into r (the check) or read r->counts: leave it */
      if (r->mreq[0] != MPI_REQUEST_NULL || r->mreq[1] != MPI_REQUEST_NULL) return rc;
    }
  }
  if (rc == STRATA_OK) {
    if (r->avg_buf) comm_divide(r->avg_buf, r->avg_count, r->avg_dtype, c->size);
#ifdef STRATA_CUDA
    /* host staging: the result back to the device */
    if (r->stage_dev && comm_nccl_copy(r->stage_dev, r->stage_recv, r->stage_bytes, c->err, sizeof c->err))
      rc = STRATA_ECUDA;
  }
  if (rc == STRATA_OK) {
#endif
    comm_count(c, r->kind, r->sent, r->recvd, MPI_Wtime() - r->t0);
  }
  request_free(r);
  return rc;
}

static int run(comm_t *c, const op_args_t *a) {
  comm_request_t *r;
  int done, rc = start(c, a, 1, &r, &done);
  if (rc != STRATA_OK) return rc;
  return finish(r, done);
}

static int run_async(comm_t *c, const op_args_t *a, comm_request_t **req) {
  int done;
  if (!req) return c ? comm_fail(c, STRATA_EINVAL, "%s: request pointer is NULL",
                                 comm_kind_name(a->kind))
                     : STRATA_EINVAL;
  return start(c, a, 0, req, &done);
}

int comm_flush(comm_t *c) {
  if (!c) return STRATA_EINVAL;
#ifdef STRATA_CUDA
  if (c->p2p_head) return comm_nccl_p2p_flush(c);
#endif
  return STRATA_OK;
}

int comm_wait(comm_request_t **req) {
  if (!req || !*req) return STRATA_OK;
  comm_request_t *r = *req;
  *req = NULL;
  return finish(r, 0);
}

int comm_test(comm_request_t **req, int *done) {
  int flag = 0;
  if (!done) return STRATA_EINVAL;
  *done = 0;
  if (!req || !*req) {
    *done = 1;
    return STRATA_OK;
  }
  comm_request_t *r = *req;
  comm_watch_serve(r->c);
  if (r->on_device) {
#ifdef STRATA_CUDA
    if (!r->event && r->post_rc == STRATA_OK) comm_nccl_p2p_flush(r->c); /* a queued send/recv */
    if (r->post_rc != STRATA_OK) {
      flag = 1; /* finish() reports it */
    } else {
      int rc = comm_nccl_query(r->event, &flag, r->c->err, sizeof r->c->err);
      if (rc != STRATA_OK) return rc;
      /* get_status, not MPI_Test: finish() compares the check's result */
      if (flag && r->mreq[1] != MPI_REQUEST_NULL)
        MPI_Request_get_status(r->mreq[1], &flag, MPI_STATUS_IGNORE);
    }
#endif
  } else {
    MPI_Status st[2];
    /* Testall would complete requests it reports as done; test without
     * completing so that finish() sees the statuses. */
    int f0 = 1, f1 = 1;
    if (r->mreq[0] != MPI_REQUEST_NULL) MPI_Request_get_status(r->mreq[0], &f0, &st[0]);
    if (r->mreq[1] != MPI_REQUEST_NULL) MPI_Request_get_status(r->mreq[1], &f1, &st[1]);
    flag = f0 && f1;
  }
  if (!flag) return STRATA_OK;
  *done = 1;
  *req = NULL;
  return finish(r, 0);
}

/* ---- the public entry points -------------------------------------------- */

#define ARGS(...) (&(op_args_t){__VA_ARGS__})

int comm_allreduce(comm_t *c, void *recv, const void *send, size_t count, comm_dtype_t dt,
                   comm_op_t op) {
  return run(c, ARGS(.kind = COMM_K_ALLREDUCE, .recv = recv, .send = send, .count = count, .dt = dt,
                     .op = op));
}
int comm_reduce(comm_t *c, void *recv, const void *send, size_t count, comm_dtype_t dt,
                comm_op_t op, int root) {
  return run(c, ARGS(.kind = COMM_K_REDUCE, .recv = recv, .send = send, .count = count, .dt = dt,
                     .op = op, .root = root));
}
int comm_broadcast(comm_t *c, void *buf, size_t count, comm_dtype_t dt, int root) {
  return run(c, ARGS(.kind = COMM_K_BROADCAST, .recv = buf, .send = buf, .count = count, .dt = dt,
                     .root = root));
}
int comm_allgather(comm_t *c, void *recv, const void *send, size_t count, comm_dtype_t dt) {
  return run(c, ARGS(.kind = COMM_K_ALLGATHER, .recv = recv, .send = send, .count = count, .dt = dt));
}
int comm_allgatherv(comm_t *c, void *recv, const void *send, const size_t *counts, comm_dtype_t dt) {
  return run(c, ARGS(.kind = COMM_K_ALLGATHERV, .recv = recv, .send = send,
                     .count = counts && c ? counts[c->rank] : 0, .dt = dt, .counts = counts));
}
int comm_reduce_scatter(comm_t *c, void *recv, const void *send, size_t count, comm_dtype_t dt,
                        comm_op_t op) {
  return run(c, ARGS(.kind = COMM_K_REDUCE_SCATTER, .recv = recv, .send = send, .count = count,
                     .dt = dt, .op = op));
}
int comm_alltoall(comm_t *c, void *recv, const void *send, size_t count, comm_dtype_t dt) {
  return run(c, ARGS(.kind = COMM_K_ALLTOALL, .recv = recv, .send = send, .count = count, .dt = dt));
}
int comm_send(comm_t *c, const void *buf, size_t count, comm_dtype_t dt, int peer, int tag) {
  return run(c, ARGS(.kind = COMM_K_SEND, .send = buf, .count = count, .dt = dt, .peer = peer,
                     .tag = tag));
}
int comm_recv(comm_t *c, void *buf, size_t count, comm_dtype_t dt, int peer, int tag) {
  return run(c, ARGS(.kind = COMM_K_RECV, .recv = buf, .count = count, .dt = dt, .peer = peer,
                     .tag = tag));
}
int comm_barrier(comm_t *c) { return run(c, ARGS(.kind = COMM_K_BARRIER)); }

int comm_iallreduce(comm_t *c, void *recv, const void *send, size_t count, comm_dtype_t dt,
                    comm_op_t op, comm_request_t **req) {
  return run_async(c, ARGS(.kind = COMM_K_ALLREDUCE, .recv = recv, .send = send, .count = count,
                           .dt = dt, .op = op), req);
}
int comm_ireduce(comm_t *c, void *recv, const void *send, size_t count, comm_dtype_t dt,
                 comm_op_t op, int root, comm_request_t **req) {
  return run_async(c, ARGS(.kind = COMM_K_REDUCE, .recv = recv, .send = send, .count = count,
                           .dt = dt, .op = op, .root = root), req);
}
int comm_ibroadcast(comm_t *c, void *buf, size_t count, comm_dtype_t dt, int root,
                    comm_request_t **req) {
  return run_async(c, ARGS(.kind = COMM_K_BROADCAST, .recv = buf, .send = buf, .count = count,
                           .dt = dt, .root = root), req);
}
int comm_iallgather(comm_t *c, void *recv, const void *send, size_t count, comm_dtype_t dt,
                    comm_request_t **req) {
  return run_async(c, ARGS(.kind = COMM_K_ALLGATHER, .recv = recv, .send = send, .count = count,
                           .dt = dt), req);
}
int comm_iallgatherv(comm_t *c, void *recv, const void *send, const size_t *counts,
                     comm_dtype_t dt, comm_request_t **req) {
  return run_async(c, ARGS(.kind = COMM_K_ALLGATHERV, .recv = recv, .send = send,
                           .count = counts && c ? counts[c->rank] : 0, .dt = dt, .counts = counts),
                   req);
}
int comm_ireduce_scatter(comm_t *c, void *recv, const void *send, size_t count, comm_dtype_t dt,
                         comm_op_t op, comm_request_t **req) {
  return run_async(c, ARGS(.kind = COMM_K_REDUCE_SCATTER, .recv = recv, .send = send,
                           .count = count, .dt = dt, .op = op), req);
}
int comm_ialltoall(comm_t *c, void *recv, const void *send, size_t count, comm_dtype_t dt,
                   comm_request_t **req) {
  return run_async(c, ARGS(.kind = COMM_K_ALLTOALL, .recv = recv, .send = send, .count = count,
                           .dt = dt), req);
}
int comm_isend(comm_t *c, const void *buf, size_t count, comm_dtype_t dt, int peer, int tag,
               comm_request_t **req) {
  return run_async(c, ARGS(.kind = COMM_K_SEND, .send = buf, .count = count, .dt = dt,
                           .peer = peer, .tag = tag), req);
}
int comm_irecv(comm_t *c, void *buf, size_t count, comm_dtype_t dt, int peer, int tag,
               comm_request_t **req) {
  return run_async(c, ARGS(.kind = COMM_K_RECV, .recv = buf, .count = count, .dt = dt,
                           .peer = peer, .tag = tag), req);
}
int comm_ibarrier(comm_t *c, comm_request_t **req) {
  return run_async(c, ARGS(.kind = COMM_K_BARRIER), req);
}
