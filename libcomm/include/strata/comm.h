/* strata/comm.h: libcomm, collectives and process meshes for strata.
 *
 * Opaque communicators over MPI (host buffers) and NCCL (device buffers, when
 * built with CUDA), named meshes of axes over the world, per-communicator
 * traffic counters, argument checking across ranks, and a watchdog that turns
 * a hung collective into a report instead of a silent hang.
 *
 * Conventions (shared by every strata library, see strata/status.h):
 *   - fallible functions return STRATA_OK (0) or a negative STRATA_E* code;
 *     comm_last_error(c) then holds one line naming the operation and values;
 *   - argument order: communicator, outputs, inputs, sizes, options;
 *   - `count` is in elements of `dtype`, never bytes;
 *   - buffers are borrowed for the duration of the call (of the request, for
 *     the non-blocking forms) and never freed by libcomm;
 *   - destroy(NULL) is a no-op.
 *
 * Minimal use:
 *
 *   comm_t *world;
 *   if (comm_init(&world, NULL) != STRATA_OK) ... ;
 *   float x[4] = {1, 2, 3, 4};
 *   comm_allreduce(world, x, x, 4, COMM_F32, COMM_SUM);    // in place
 *   comm_destroy(world);
 *   comm_finalize();
 */
#ifndef STRATA_COMM_H
#define STRATA_COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <strata/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct comm comm_t;                 /* a group of ranks (owns an MPI communicator) */
typedef struct comm_request comm_request_t; /* an operation in flight */
typedef struct comm_mesh comm_mesh_t;       /* named axes over a communicator */

/* Element types. f16 is IEEE binary16 and bf16 is bfloat16, both carried as
 * 16-bit patterns; their sums, maxima and minima are computed in f32 inside
 * MPI user-defined operations and rounded back once per combine. */
typedef enum {
  COMM_F32 = 0, COMM_F64, COMM_F16, COMM_BF16, COMM_I32, COMM_I64, COMM_U8, COMM_NDTYPES
} comm_dtype_t;

/* Reductions. COMM_AVG is the sum divided by the group size (integer
 * division for integer types). */
typedef enum { COMM_SUM = 0, COMM_MAX, COMM_MIN, COMM_AVG, COMM_NOPS } comm_op_t;

/* Operation kinds, the index of the traffic counters. */
typedef enum {
  COMM_K_ALLREDUCE = 0, COMM_K_REDUCE, COMM_K_BROADCAST, COMM_K_ALLGATHER, COMM_K_ALLGATHERV,
  COMM_K_REDUCE_SCATTER, COMM_K_ALLTOALL, COMM_K_SEND, COMM_K_RECV, COMM_K_BARRIER, COMM_NKINDS
} comm_kind_t;

/* What the watchdog does when an operation exceeds the timeout. */
typedef enum {
  COMM_ON_TIMEOUT_ERROR = 0, /* return STRATA_ETIMEOUT; the communicator is then failed */
  COMM_ON_TIMEOUT_ABORT      /* print the report on stderr and MPI_Abort the job */
} comm_timeout_action_t;

typedef struct {
  /* Watchdog: an operation not complete after timeout_s seconds is reported
   * (communicator, operation, sequence number, and which ranks have not
   * arrived or are in a different operation). 0 waits forever. */
  double timeout_s;
  comm_timeout_action_t on_timeout;
  /* Before each collective, ranks agree on (operation, count, dtype, op,
   * root, sequence number) with one 16-byte allreduce; a disagreement is
   * returned as STRATA_EINVAL with every rank's arguments, instead of a hang
   * or a wrong result. 1 by default; 0 trades that safety for one small
   * message per call. Without it, mismatched collectives are undefined in
   * MPI and not always caught: Open MPI was seen to complete a broadcast on
   * one rank against another rank's allreduce, silently, with wrong data. */
  int check_args;
  /* Placement of mesh axes: the node of this rank, or -1 to detect it with
   * an MPI shared-memory split. Ranks with equal node ids share a node. */
  int node_id;
} comm_config_t;
#define COMM_CONFIG_DEFAULTS                                                                       \
  { .timeout_s = 0.0, .on_timeout = COMM_ON_TIMEOUT_ERROR, .check_args = 1, .node_id = -1 }

/* Traffic of one operation kind on one communicator, as seen by this rank.
 * Bytes are the algorithmic volumes of the bandwidth-optimal ring algorithms
 * (what NCCL runs and what the planner's formulas count), computed from the
 * arguments: with n ranks and a buffer of B bytes,
 *   allreduce       sent = recv = 2 (n-1)/n B
 *   reduce_scatter  sent = recv = (n-1)/n B      (B = the whole input)
 *   allgather       sent = recv = (n-1)/n B      (B = the whole output)
 *   allgatherv      recv = B - own block, sent = B - block of rank r+1
 *   alltoall        sent = recv = (n-1)/n B      (B = the whole send buffer)
 *   reduce          sent = recv = (n-1)/n B, then B/n to the root (ring
 *                   reduce-scatter + gather): non-roots send (n-1)/n B + B/n,
 *                   the root receives (n-1)/n B + (n-1)/n B
 *   broadcast       root sends B, others receive B (pipelined chain)
 *   send / recv     B
 * seconds is the wall time from the call (or the non-blocking start) to its
 * completion. */
typedef struct {
  uint64_t calls;
  uint64_t bytes_sent;
  uint64_t bytes_recv;
  double seconds;
} comm_counter_t;

/* ---- communicators ---------------------------------------------------- */

/* Attaches to MPI_COMM_WORLD, initialising MPI first if the host program has
 * not (then comm_finalize() finalises it). cfg NULL means defaults. The
 * caller destroys *out. */
STRATA_API int comm_init(comm_t **out, const comm_config_t *cfg);

/* Adopts a communicator of the host program: libcomm duplicates it, so the
 * host keeps ownership of `mpi` and may free it after this call. */
STRATA_API int comm_from_mpi(comm_t **out, MPI_Comm mpi, const comm_config_t *cfg);

/* A duplicate of c with the same configuration and fresh counters. Collective. */
STRATA_API int comm_dup(comm_t **out, comm_t *c);

/* Splits c: ranks with the same color form a group, ordered by key (ties by
 * rank in c). color < 0 leaves this rank out: *out is set to NULL. Collective. */
STRATA_API int comm_split(comm_t **out, comm_t *c, int color, int key);

/* Grows a running group (MPI's dynamic processes): the ranks of `group`
 * (collective over it) start n new processes running `command` with the
 * arguments argv (NULL-terminated; NULL: none), through MPI_Comm_spawn from
 * group's rank 0, placed as info says (MPI_INFO_NULL: where the MPI runtime
 * puts them; Open MPI's "host", "add-host", ...), and merge with them into
 * *grown: group's ranks first, in their order, then the new processes in
 * the order of their own MPI_COMM_WORLD. Every new process calls
 * comm_spawned once. The caller owns *grown (MPI_Comm_free); errors are
 * returned on it. On failure *grown is MPI_COMM_NULL on every rank of the
 * group and err (may be NULL) names the command and MPI's message:
 * STRATA_EINVAL when command is not an executable file (checked first,
 * because Open MPI ends the whole job when it cannot start one),
 * STRATA_EMPI when the runtime refused. Open MPI 4.1 needs free slots
 * for the new processes (mpirun --oversubscribe, or --host / a hostfile
 * with more slots); without them it returns MPI_ERR_SPAWN ("All nodes which
 * are allocated for this job are already filled") to group's rank 0 only,
 * and the other ranks wait inside MPI_Comm_spawn until mpirun's --timeout.
 * (Spawning from rank 0 alone and joining the others afterwards avoids that
 * wait, but then Open MPI does not see the new processes as on the same
 * node from every old rank, and MPI_Comm_split_type, on which the engine's
 * memory check and libcomm's meshes rely, splits them differently.) */
STRATA_API int comm_spawn(MPI_Comm group, int n, const char *command, char *const argv[], MPI_Info info,
                          MPI_Comm *grown, char *err, size_t errlen);
/* In a process that comm_spawn started: *grown, the communicator merged with
 * the ranks that started it (collective with their comm_spawn), owned by
 * the caller. In any other process *grown is MPI_COMM_NULL and nothing
 * happens. */
STRATA_API int comm_spawned(MPI_Comm *grown, char *err, size_t errlen);

/* Frees c and its MPI and NCCL communicators. Collective over c's ranks. */
STRATA_API void comm_destroy(comm_t *c);

/* Finalises MPI if libcomm initialised it; otherwise does nothing. Call once,
 * after every communicator is destroyed. */
STRATA_API int comm_finalize(void);

STRATA_API int comm_rank(const comm_t *c);
STRATA_API int comm_size(const comm_t *c);
/* The MPI communicator underneath (borrowed: do not free). */
STRATA_API MPI_Comm comm_mpi(const comm_t *c);
/* Names appear in error and watchdog messages ("world", "tp", ...). */
STRATA_API void comm_set_name(comm_t *c, const char *name);
STRATA_API const char *comm_name(const comm_t *c);
/* Changes the watchdog of c (seconds; 0 disables). */
STRATA_API int comm_set_timeout(comm_t *c, double timeout_s, comm_timeout_action_t action);

/* The last error on c, one line; "" when none. Valid until the next call on c. */
STRATA_API const char *comm_last_error(const comm_t *c);
STRATA_API const char *comm_strerror(int code);
STRATA_API size_t comm_dtype_size(comm_dtype_t dtype);
STRATA_API const char *comm_dtype_name(comm_dtype_t dtype);
STRATA_API const char *comm_kind_name(comm_kind_t kind);

/* Counters of one kind (copied out), and a reset of all kinds. */
STRATA_API int comm_counters(const comm_t *c, comm_kind_t kind, comm_counter_t *out);
STRATA_API void comm_counters_reset(comm_t *c);

/* ---- collectives ------------------------------------------------------
 * All ranks of c call the same collectives in the same order with matching
 * arguments (checked when cfg.check_args). Buffers on a CUDA device go
 * through NCCL (a build without CUDA returns STRATA_EUNSUPPORTED for them);
 * host buffers through MPI. "In place" means recv == send.
 *
 * Device buffers: the operation runs on the communicator's own CUDA stream,
 * after all work queued before the call on the legacy default stream (and so
 * on every blocking stream; work on a stream created non-blocking must be
 * synchronised by the caller); a blocking call returns, and wait/test report
 * done, once it has completed on the device. The first device operation on
 * a communicator creates its NCCL communicator and so must be called by all
 * of its ranks. Sends and receives ignore the tag (NCCL matches them in call
 * order per peer) and cannot report a length mismatch; the non-blocking ones
 * are posted together as one NCCL group by the next wait, test or device
 * operation on c, so that an exchange (isend + irecv on both sides, or with
 * oneself) completes. AVG of f16/bf16/f32/f64 multiplies by 1/size before
 * summing (NCCL's ncclAvg), which may round differently from the host path's
 * sum-then-divide. Where a buffer lives is asked of the CUDA runtime
 * (cudaPointerGetAttributes), which creates the primary context of the
 * calling thread's current device if there is none yet: on a node with
 * several GPUs, call cudaSetDevice with the rank's own GPU before the first
 * collective, or every rank's context lands on device 0. */

/* recv[i] = op over ranks of send[i], i < count. In place allowed. */
STRATA_API int comm_allreduce(comm_t *c, void *recv, const void *send, size_t count,
                              comm_dtype_t dtype, comm_op_t op);
/* Like allreduce, but only root's recv is written (recv may be NULL elsewhere). */
STRATA_API int comm_reduce(comm_t *c, void *recv, const void *send, size_t count,
                           comm_dtype_t dtype, comm_op_t op, int root);
/* buf on every rank = buf on root. */
STRATA_API int comm_broadcast(comm_t *c, void *buf, size_t count, comm_dtype_t dtype, int root);
/* recv[r*count .. (r+1)*count) = send of rank r. In place: send == recv + rank*count. */
STRATA_API int comm_allgather(comm_t *c, void *recv, const void *send, size_t count,
                              comm_dtype_t dtype);
/* Blocks of unequal sizes: rank r contributes counts[r] elements, placed at
 * the sum of counts[0..r). counts (size entries) must agree on every rank. */
STRATA_API int comm_allgatherv(comm_t *c, void *recv, const void *send, const size_t *counts,
                               comm_dtype_t dtype);
/* send holds size*count elements; rank r receives op over ranks of block r. */
STRATA_API int comm_reduce_scatter(comm_t *c, void *recv, const void *send, size_t count,
                                   comm_dtype_t dtype, comm_op_t op);
/* Block j of send (count elements) goes to rank j, arriving as block r there. */
STRATA_API int comm_alltoall(comm_t *c, void *recv, const void *send, size_t count,
                             comm_dtype_t dtype);
STRATA_API int comm_send(comm_t *c, const void *buf, size_t count, comm_dtype_t dtype, int peer,
                         int tag);
/* Receives exactly count elements; a message of another length is an error
 * naming both lengths. */
STRATA_API int comm_recv(comm_t *c, void *buf, size_t count, comm_dtype_t dtype, int peer, int tag);
STRATA_API int comm_barrier(comm_t *c);

/* Non-blocking forms: same arguments, plus *req, which the caller completes
 * with comm_wait or comm_test (both set *req to NULL on completion and free
 * it). Buffers must stay valid until then. */
STRATA_API int comm_iallreduce(comm_t *c, void *recv, const void *send, size_t count,
                               comm_dtype_t dtype, comm_op_t op, comm_request_t **req);
STRATA_API int comm_ireduce(comm_t *c, void *recv, const void *send, size_t count,
                            comm_dtype_t dtype, comm_op_t op, int root, comm_request_t **req);
STRATA_API int comm_ibroadcast(comm_t *c, void *buf, size_t count, comm_dtype_t dtype, int root,
                               comm_request_t **req);
STRATA_API int comm_iallgather(comm_t *c, void *recv, const void *send, size_t count,
                               comm_dtype_t dtype, comm_request_t **req);
STRATA_API int comm_iallgatherv(comm_t *c, void *recv, const void *send, const size_t *counts,
                                comm_dtype_t dtype, comm_request_t **req);
STRATA_API int comm_ireduce_scatter(comm_t *c, void *recv, const void *send, size_t count,
                                    comm_dtype_t dtype, comm_op_t op, comm_request_t **req);
STRATA_API int comm_ialltoall(comm_t *c, void *recv, const void *send, size_t count,
                              comm_dtype_t dtype, comm_request_t **req);
STRATA_API int comm_isend(comm_t *c, const void *buf, size_t count, comm_dtype_t dtype, int peer,
                          int tag, comm_request_t **req);
STRATA_API int comm_irecv(comm_t *c, void *buf, size_t count, comm_dtype_t dtype, int peer, int tag,
                          comm_request_t **req);
STRATA_API int comm_ibarrier(comm_t *c, comm_request_t **req);

/* Posts c's queued device sends and receives now, as one NCCL group (else
 * the next wait, test or device operation on c posts them): a caller that
 * must control how its point-to-point operations are grouped, so that every
 * peer's groups pair up, calls it after each group. A no-op with nothing
 * queued (host buffers, a build without CUDA). A failure to post is also
 * reported by the requests' wait. */
STRATA_API int comm_flush(comm_t *c);
/* Completes *req (watchdog applies), then frees it and sets *req = NULL.
 * *req == NULL is a no-op returning STRATA_OK. */
STRATA_API int comm_wait(comm_request_t **req);
/* *done = 1 and as comm_wait if complete; *done = 0 otherwise (the watchdog
 * applies to comm_wait only). */
STRATA_API int comm_test(comm_request_t **req, int *done);

/* ---- meshes -----------------------------------------------------------
 * A mesh arranges the ranks of a communicator on named axes, innermost
 * first: with axes (tp=2, dp=3), ranks 0,1 form the first tp group. By
 * default ranks are ordered by node before the axes are laid out, so the
 * innermost axes fall on ranks of the same node (tensor parallelism inside a
 * node, pipeline and data parallelism across nodes). */

typedef struct {
  int node_order; /* 1 (default): order ranks by node, then rank; 0: by rank only */
} comm_mesh_config_t;
#define COMM_MESH_CONFIG_DEFAULTS {.node_order = 1}

#define COMM_MESH_MAX_AXES 6

/* Builds a mesh over c with naxes axes (names unique, sizes >= 1, product
 * equal to comm_size(c): otherwise STRATA_EINVAL naming the numbers).
 * Creates one communicator per axis and per set of axes. Collective. The
 * mesh borrows c, which must outlive it; the caller destroys *out. */
STRATA_API int comm_mesh_create(comm_mesh_t **out, comm_t *c, int naxes, const char *const *names,
                                const int *sizes, const comm_mesh_config_t *cfg);
STRATA_API void comm_mesh_destroy(comm_mesh_t *m);
/* The group of ranks that differ only along the listed axes, e.g. "tp" or
 * "tp,dp" (comma-separated, any order; ranks in it are ordered innermost
 * axis first). Borrowed from the mesh. */
STRATA_API int comm_mesh_group(comm_mesh_t *m, const char *axes, comm_t **out);
/* This rank's coordinate along an axis; -1 if the mesh has no such axis. */
STRATA_API int comm_mesh_coord(const comm_mesh_t *m, const char *axis);
/* Size of an axis; -1 if unknown. */
STRATA_API int comm_mesh_axis_size(const comm_mesh_t *m, const char *axis);
/* The rank in the mesh's communicator at the given coordinates (one per axis,
 * innermost first). */
STRATA_API int comm_mesh_rank_at(const comm_mesh_t *m, const int *coords, int *rank);
STRATA_API const char *comm_mesh_last_error(const comm_mesh_t *m);

/* A new communicator (the caller frees it) with c's ranks in the order
 * meshes place them: by node (c's configured node_id, else the lowest rank
 * sharing memory with it), then by rank. A run built on it keeps groups of
 * consecutive ranks (tensor parallelism) inside a node however the
 * launcher mapped the ranks to nodes; rank 0 stays first when its node has
 * the lowest id (always so with detected ids). Collective. */
STRATA_API int comm_node_order(comm_t *c, MPI_Comm *out);

/* ---- the rank's GPU ---------------------------------------------------
 * A run with one GPU per rank picks it before its first device collective
 * (NCCL communicators, and the CUDA runtime's pointer queries that route a
 * buffer to NCCL, use the calling thread's current device). */

/* CUDA devices this build can use: 0 without CUDA or without a GPU. */
STRATA_API int comm_cuda_device_count(void);
/* The GPU of this rank of comm (a world communicator): its rank among the
 * ranks of comm sharing its node (MPI_Comm_split_type SHARED) modulo the
 * node's CUDA devices, into *device; -1 when there is none. *local (may be
 * NULL) receives that node-local rank. Collective over comm. */
STRATA_API int comm_local_device(MPI_Comm comm, int *device, int *local);
/* Makes device the calling thread's current CUDA device (cudaSetDevice).
 * STRATA_EUNSUPPORTED on a build without CUDA or with no such device
 * (msg, may be NULL, says which), STRATA_ECUDA when the runtime refuses. */
STRATA_API int comm_cuda_set_device(int device, char *msg, size_t msglen);

/* ---- ranks sharing a GPU ------------------------------------------------
 * NCCL refuses a communicator with two ranks on the same device ("Duplicate
 * GPU"). libcomm therefore decides, when it makes a communicator (on a
 * machine with GPUs), from every rank's node and current CUDA device at
 * that moment (pick the device first, as the engine does), whether two of
 * its ranks share one; if so, device buffers of that communicator go
 * through host memory and MPI instead of NCCL: copied to a pinned host
 * buffer, the MPI operation, copied back, with the same byte counters and
 * the same completion guarantees (a wait or test reports the result on the
 * device). The first such communicator of a process says so on stderr
 * (its rank 0). Slower than NCCL, so meant for tests and several ranks on
 * one GPU, not for training at speed. */

/* Whether ranks placed on node[i] with CUDA device device[i] (i < n; -1:
 * no device) would put two ranks on one GPU: 1 when two ranks with the
 * same node have the same device >= 0, else 0 (also for n < 2 or NULL
 * arrays). Pure: the rule libcomm applies. */
STRATA_API int comm_device_staging(int n, const int *node, const int *device);
/* 1 when c routes device buffers through host staging (see above), 0 when
 * through NCCL (or c is NULL). */
STRATA_API int comm_is_staged(const comm_t *c);

#ifdef __cplusplus
}
#endif
#endif
