/* Growing a running group: its ranks start new processes (MPI's dynamic
 * processes, MPI_Comm_spawn) and merge with them into one communicator, so
 * that a run can move its state to more ranks in memory instead of through
 * a checkpoint and a relaunch. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

static const char *mpi_message(int mrc, char *buf) {
  int len = 0;
  buf[0] = 0;
  MPI_Error_string(mrc, buf, &len);
  return buf;
}

/* The merged communicator of intercommunicator inter (high: this side's
 * ranks come second), with errors returned; inter is freed. */
static int merge(MPI_Comm *inter, int high, MPI_Comm *grown, char *err, size_t errlen) {
  char msg[MPI_MAX_ERROR_STRING];
  int mrc = MPI_Intercomm_merge(*inter, high, grown);
  MPI_Comm_free(inter);
  if (mrc != MPI_SUCCESS) {
    *grown = MPI_COMM_NULL;
    return fail(err, errlen, STRATA_EMPI, "merging the old and the new ranks: MPI error %d: %s", mrc,
                mpi_message(mrc, msg));
  }
  MPI_Comm_set_errhandler(*grown, MPI_ERRORS_RETURN);
  return STRATA_OK;
}

int comm_spawn(MPI_Comm group, int n, const char *command, char *const argv[], MPI_Info info, MPI_Comm *grown,
               char *err, size_t errlen) {
  char msg[MPI_MAX_ERROR_STRING];
  int init = 0, fin = 0, rank = 0, mrc, rc = STRATA_OK;
  MPI_Comm g = MPI_COMM_NULL, inter = MPI_COMM_NULL;
  if (err && errlen) err[0] = 0;
  if (!grown) return fail(err, errlen, STRATA_EINVAL, "comm_spawn: grown is NULL");
  *grown = MPI_COMM_NULL;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return fail(err, errlen, STRATA_ESTATE, "comm_spawn: MPI is not initialised (or finalised)");
  if (group == MPI_COMM_NULL || !command || !command[0] || n < 1)
    return fail(err, errlen, STRATA_EINVAL, "comm_spawn: need a group, a command and n >= 1 (n = %d)", n);
  /* A duplicate, so that the errors returned here leave the caller's
   * communicator's handler as it was. */
  if ((mrc = MPI_Comm_dup(group, &g)) != MPI_SUCCESS)
    return fail(err, errlen, STRATA_EMPI, "comm_spawn: MPI error %d: %s", mrc, mpi_message(mrc, msg));
  MPI_Comm_set_errhandler(g, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g, &rank);
  /* Open MPI ends the whole job, not just the call, when it cannot start
   * the program: rank 0 checks that it can first and tells the others. */
  int ok = 1;
  if (rank == 0 && strchr(command, '/') && access(command, X_OK) != 0) ok = 0;
  MPI_Bcast(&ok, 1, MPI_INT, 0, g);
  if (!ok) {
    rc = fail(err, errlen, STRATA_EINVAL, "comm_spawn: '%s' is not an executable file", command);
    goto done;
  }
  int *codes = calloc((size_t)n, sizeof *codes);
  if (!codes) {
    rc = fail(err, errlen, STRATA_ENOMEM, "comm_spawn: out of memory");
    goto done;
  }
  mrc = MPI_Comm_spawn(command, argv ? (char **)argv : MPI_ARGV_NULL, n, info, 0, g, &inter, codes);
  if (mrc != MPI_SUCCESS) {
    int k = !err || !errlen ? 0 : snprintf(err, errlen, "comm_spawn: starting %d processes of '%s': MPI error %d: %s; their codes:",
                     n, command, mrc, mpi_message(mrc, msg));
    for (int i = 0; i < n && k > 0 && (size_t)k < errlen; i++)
      k += snprintf(err + k, errlen - (size_t)k, " %d", codes[i]);
    rc = STRATA_EMPI;
  }
  free(codes);
  if (rc == STRATA_OK) rc = merge(&inter, 0, grown, err, errlen);
done:
  MPI_Comm_free(&g);
  return rc;
}

int comm_spawned(MPI_Comm *grown, char *err, size_t errlen) {
  MPI_Comm parent = MPI_COMM_NULL;
  int init = 0;
  if (err && errlen) err[0] = 0;
  if (!grown) return fail(err, errlen, STRATA_EINVAL, "comm_spawned: grown is NULL");
  *grown = MPI_COMM_NULL;
  MPI_Initialized(&init);
  if (!init) return fail(err, errlen, STRATA_ESTATE, "comm_spawned: MPI is not initialised");
  MPI_Comm_get_parent(&parent);
  if (parent == MPI_COMM_NULL) return STRATA_OK;
  /* (the parent intercommunicator is MPI's; merge frees this handle of it) */
  return merge(&parent, 1, grown, err, errlen);
}
