/* Communicators: creation, naming, errors, counters. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether libcomm called MPI_Init (and so owes the MPI_Finalize). This is
 * process state by nature: MPI itself is initialised once per process. */
static int comm_owns_mpi;

int comm_fail(comm_t *c, int code, const char *fmt, ...) {
  if (c) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
  }
  return code;
}

int comm_fail_mpi(comm_t *c, int mpi_rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(mpi_rc, msg, &len);
  return comm_fail(c, STRATA_EMPI, "%s on communicator '%s': MPI error %d: %s", what,
                   c ? c->name : "?", mpi_rc, msg);
}

const char *comm_strerror(int code) { return strata_status_string(code); }

static int cuda_device_count(void) {
#ifdef STRATA_CUDA
  return comm_nccl_device_count();
#else
  return 0;
#endif
}

int comm_cuda_device_count(void) { return cuda_device_count(); }

int comm_device_staging(int n, const int *node, const int *device) {
  if (n < 2 || !node || !device) return 0;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n && device[i] >= 0; j++)
      if (node[i] == node[j] && device[i] == device[j]) return 1;
  return 0;
}

int comm_is_staged(const comm_t *c) { return c ? c->staged : 0; }

/* Whether two ranks of c share a GPU (comm_device_staging over every
 * rank's node, named by its node's lowest rank in c, and current device).
 * Collective over c; only on machines with GPUs. */
static int decide_staging(comm_t *c) {
#ifdef STRATA_CUDA
  MPI_Comm node = MPI_COMM_NULL;
  int mine[2] = {c->rank, comm_nccl_current_device()}, rc = STRATA_OK, mrc;
  int *all = malloc(sizeof(int) * 2 * (size_t)c->size), *nodes = NULL, *devs = NULL;
  if (!all || !(nodes = malloc(sizeof(int) * (size_t)c->size)) || !(devs = malloc(sizeof(int) * (size_t)c->size))) {
    rc = comm_fail(c, STRATA_ENOMEM, "out of memory");
    goto done;
  }
  if ((mrc = MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node)) != MPI_SUCCESS ||
      (mrc = MPI_Bcast(&mine[0], 1, MPI_INT, 0, node)) != MPI_SUCCESS || /* the node's lowest rank of c */
      (mrc = MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, c->mpi)) != MPI_SUCCESS) {
    rc = comm_fail_mpi(c, mrc, "finding the ranks that share a GPU");
    goto done;
  }
  for (int i = 0; i < c->size; i++) nodes[i] = all[2 * i], devs[i] = all[2 * i + 1];
  c->staged = comm_device_staging(c->size, nodes, devs);
done:
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  free(all), free(nodes), free(devs);
  return rc;
#else
  (void)c;
  return STRATA_OK;
#endif
}

int comm_local_device(MPI_Comm comm, int *device, int *local) {
  MPI_Comm node = MPI_COMM_NULL;
  int r = 0, mrc;
  if (!device) return STRATA_EINVAL;
  *device = -1;
  if ((mrc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node)) != MPI_SUCCESS)
    return STRATA_EMPI;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  if (local) *local = r;
  int n = cuda_device_count();
  if (n > 0) *device = r % n;
  return STRATA_OK;
}

int comm_cuda_set_device(int device, char *msg, size_t msglen) {
  int n = cuda_device_count();
  if (msg && msglen) msg[0] = 0;
#ifndef STRATA_CUDA
  (void)n, (void)device;
  if (msg && msglen) snprintf(msg, msglen, "this build of strata has no CUDA (built with CUDA=0 or without nvcc)");
  return STRATA_EUNSUPPORTED;
#else
  if (device < 0 || device >= n) {
    if (msg && msglen) {
      if (n == 0) snprintf(msg, msglen, "no CUDA device is present on this machine");
      else snprintf(msg, msglen, "cuda:%d: this machine has %d CUDA device%s (0 to %d)", device, n, n > 1 ? "s" : "", n - 1);
    }
    return STRATA_EUNSUPPORTED;
  }
  char err[256] = "";
  if (comm_nccl_set_device(device, err, sizeof err)) {
    if (msg && msglen) snprintf(msg, msglen, "cuda:%d: %s", device, err);
    return STRATA_ECUDA;
  }
  return STRATA_OK;
#endif
}

/* Wraps an MPI communicator we already own (mpi is consumed, even on failure). */
static int comm_wrap(comm_t **out, MPI_Comm mpi, const comm_config_t *cfg, const char *name) {
  int rc = STRATA_ENOMEM, mrc;
  comm_t *c = calloc(1, sizeof *c);
  if (!c) goto fail;
  c->mpi = mpi;
  c->side = MPI_COMM_NULL;
  c->cfg = cfg ? *cfg : (comm_config_t)COMM_CONFIG_DEFAULTS;
  c->busy_kind = -1;
  snprintf(c->name, sizeof c->name, "%s", name);
  MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
  MPI_Comm_rank(mpi, &c->rank);
  MPI_Comm_size(mpi, &c->size);
  if ((mrc = MPI_Comm_dup(mpi, &c->side)) != MPI_SUCCESS) {
    rc = comm_fail_mpi(c, mrc, "creating the watchdog channel");
    goto fail;
  }
  if ((rc = comm_types_init()) != STRATA_OK) goto fail;
  c->cuda_devices = cuda_device_count();
  if (c->cuda_devices > 0 && (rc = decide_staging(c)) != STRATA_OK) goto fail;
  *out = c;
  return STRATA_OK;
fail:
  if (c) {
    if (c->side != MPI_COMM_NULL) MPI_Comm_free(&c->side);
    free(c);
  }
  MPI_Comm_free(&mpi);
  *out = NULL;
  return rc;
}

static int config_check(const comm_config_t *cfg) {
  if (!cfg) return STRATA_OK;
  if (!(cfg->timeout_s >= 0.0)) return STRATA_EINVAL;
  if (cfg->on_timeout != COMM_ON_TIMEOUT_ERROR && cfg->on_timeout != COMM_ON_TIMEOUT_ABORT)
    return STRATA_EINVAL;
  return STRATA_OK;
}

int comm_from_mpi(comm_t **out, MPI_Comm mpi, const comm_config_t *cfg) {
  int init = 0, fin = 0, mrc;
  MPI_Comm dup;
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  if (config_check(cfg) != STRATA_OK) return STRATA_EINVAL;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin || mpi == MPI_COMM_NULL) return STRATA_ESTATE;
  if ((mrc = MPI_Comm_dup(mpi, &dup)) != MPI_SUCCESS) return STRATA_EMPI;
  return comm_wrap(out, dup, cfg, mpi == MPI_COMM_WORLD ? "world" : "adopted");
}

int comm_init(comm_t **out, const comm_config_t *cfg) {
  int init = 0, fin = 0, provided;
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) return STRATA_ESTATE;
  if (!init) {
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      return STRATA_EMPI;
    comm_owns_mpi = 1;
  }
  return comm_from_mpi(out, MPI_COMM_WORLD, cfg);
}

int comm_dup(comm_t **out, comm_t *c) {
  MPI_Comm dup;
  int mrc;
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  if (!c) return STRATA_EINVAL;
  if ((mrc = MPI_Comm_dup(c->mpi, &dup)) != MPI_SUCCESS) return comm_fail_mpi(c, mrc, "comm_dup");
  return comm_wrap(out, dup, &c->cfg, c->name);
}

int comm_split(comm_t **out, comm_t *c, int color, int key) {
  MPI_Comm sub;
  int mrc;
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  if (!c) return STRATA_EINVAL;
  if ((mrc = MPI_Comm_split(c->mpi, color < 0 ? MPI_UNDEFINED : color, key, &sub)) != MPI_SUCCESS)
    return comm_fail_mpi(c, mrc, "comm_split");
  if (sub == MPI_COMM_NULL) return STRATA_OK;
  return comm_wrap(out, sub, &c->cfg, c->name);
}

void comm_destroy(comm_t *c) {
  if (!c) return;
#ifdef STRATA_CUDA
  /* device sends/receives still queued belong to requests the caller never
   * completed; they are dropped with the NCCL communicator */
  c->p2p_head = c->p2p_tail = NULL;
  comm_nccl_destroy(c->nccl, c->failed); /* failed: NCCL work may be stuck, abort it */
#endif
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) {
    MPI_Comm_free(&c->side);
    MPI_Comm_free(&c->mpi);
  }
  free(c);
}

int comm_finalize(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (comm_owns_mpi && !fin) {
    comm_owns_mpi = 0;
    if (MPI_Finalize() != MPI_SUCCESS) return STRATA_EMPI;
  }
  return STRATA_OK;
}

int comm_rank(const comm_t *c) { return c ? c->rank : -1; }
int comm_size(const comm_t *c) { return c ? c->size : -1; }
MPI_Comm comm_mpi(const comm_t *c) { return c ? c->mpi : MPI_COMM_NULL; }
const char *comm_name(const comm_t *c) { return c ? c->name : ""; }
const char *comm_last_error(const comm_t *c) { return c ? c->err : "no communicator (NULL)"; }

void comm_set_name(comm_t *c, const char *name) {
  if (c && name) snprintf(c->name, sizeof c->name, "%s", name);
}

int comm_set_timeout(comm_t *c, double timeout_s, comm_timeout_action_t action) {
  if (!c) return STRATA_EINVAL;
  if (!(timeout_s >= 0.0) || (action != COMM_ON_TIMEOUT_ERROR && action != COMM_ON_TIMEOUT_ABORT))
    return comm_fail(c, STRATA_EINVAL, "comm_set_timeout: timeout %g s / action %d is invalid",
                     timeout_s, (int)action);
  c->cfg.timeout_s = timeout_s;
  c->cfg.on_timeout = action;
  return STRATA_OK;
}

static const char *const kind_names[COMM_NKINDS] = {
    "allreduce",      "reduce",   "broadcast", "allgather", "allgatherv",
    "reduce_scatter", "alltoall", "send",      "recv",      "barrier"};

const char *comm_kind_name(comm_kind_t kind) {
  return (unsigned)kind < COMM_NKINDS ? kind_names[kind] : "unknown";
}

void comm_count(comm_t *c, comm_kind_t kind, uint64_t sent, uint64_t recvd, double seconds) {
  comm_counter_t *k = &c->counters[kind];
  k->calls++;
  k->bytes_sent += sent;
  k->bytes_recv += recvd;
  k->seconds += seconds;
}

int comm_counters(const comm_t *c, comm_kind_t kind, comm_counter_t *out) {
  if (!c || !out || (unsigned)kind >= COMM_NKINDS) return STRATA_EINVAL;
  *out = c->counters[kind];
  return STRATA_OK;
}

void comm_counters_reset(comm_t *c) {
  if (c) memset(c->counters, 0, sizeof c->counters);
}
