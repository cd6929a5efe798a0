/* strata/status.h: the status codes every strata library returns.
 *
 * Header-only on purpose: libcomm, libtensor, liboptim and liboffload share
 * these codes without linking to each other. Fallible functions return 0 on
 * success and one of the negative codes below on failure; each library has
 * its own *_strerror(code) (a thin wrapper over strata_status_string) and a
 * per-handle last-error message that names the offending values. */
#ifndef STRATA_STATUS_H
#define STRATA_STATUS_H

#if defined(__GNUC__)
#define STRATA_API __attribute__((visibility("default")))
#else
#define STRATA_API
#endif

enum strata_status {
  STRATA_OK = 0,
  STRATA_EINVAL = -1,      /* invalid argument (NULL, out of range, bad enum) */
  STRATA_ENOMEM = -2,      /* allocation failed, or a memory budget is exhausted */
  STRATA_EUNSUPPORTED = -3, /* this build or device cannot do it (e.g. CUDA off) */
  STRATA_EMPI = -4,        /* MPI reported an error */
  STRATA_ECUDA = -5,       /* the CUDA runtime or cuBLAS reported an error */
  STRATA_ENCCL = -6,       /* NCCL reported an error */
  STRATA_ETIMEOUT = -7,    /* an operation did not complete within its timeout */
  STRATA_EIO = -8,         /* a file could not be read or written */
  STRATA_ESHAPE = -9,      /* shapes, dtypes or devices do not match */
  STRATA_EHDF5 = -10,      /* HDF5 reported an error */
  STRATA_ESTATE = -11,     /* the handle is in a state that forbids the call */
  STRATA_ECORRUPT = -12,   /* data failed a checksum or format check */
  STRATA_ENOTFOUND = -13,  /* a named thing (axis, tensor, dataset) does not exist */
  STRATA_ELUA = -14,       /* a Lua recipe raised an error */
};

/* A short, static description of a status code; never NULL. */
static inline const char *strata_status_string(int code) {
  switch (code) {
  case STRATA_OK: return "success";
  case STRATA_EINVAL: return "invalid argument";
  case STRATA_ENOMEM: return "out of memory";
  case STRATA_EUNSUPPORTED: return "not supported by this build or device";
  case STRATA_EMPI: return "MPI error";
  case STRATA_ECUDA: return "CUDA error";
  case STRATA_ENCCL: return "NCCL error";
  case STRATA_ETIMEOUT: return "timed out";
  case STRATA_EIO: return "I/O error";
  case STRATA_ESHAPE: return "shape, dtype or device mismatch";
  case STRATA_EHDF5: return "HDF5 error";
  case STRATA_ESTATE: return "invalid state";
  case STRATA_ECORRUPT: return "corrupt data";
  case STRATA_ENOTFOUND: return "not found";
  case STRATA_ELUA: return "Lua error";
  default: return "unknown status code";
  }
}

#endif
