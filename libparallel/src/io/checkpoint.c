/* Layout-independent checkpoints in parallel HDF5.
 *
 * Every array is one dataset with its global shape; a rank owns a
 * contiguous range of the flattened (row-major) array, which is a union of
 * at most 2*ndim-1 hyperslabs of the dataset. Writes are collective (HDF5's
 * filters, here Fletcher32, need collective writes; a rank with nothing to
 * write still takes part with an empty selection). Reads are independent,
 * and every status is reduced over the communicator: a checksum failure
 * shows only on the rank that reads the damaged chunk, yet every rank must
 * leave the load the same way.
 *
 * Durability: the file is written as "<path>.tmp", closed, fsync'd and then
 * renamed onto <path> by rank 0, so <path> is always either the previous
 * complete checkpoint or the new complete one.
 *
 * Full disks: a write that fails inside one of HDF5's collective steps
 * leaves the other ranks waiting in that step forever (HDF5 cannot recover
 * from it). So a writer first reserves the bytes the checkpoint will take
 * (par_ckpt_reserve: fallocate on rank 0, which also counts quotas), and a
 * full disk is refused before HDF5 writes anything. With a timeout, a
 * status exchange that peers never reach fails instead of waiting forever,
 * and a collective step of HDF5 itself (which cannot be left) that has not
 * returned in time is reported to the fatal handler (io_deadline). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <strata/parallel.h>

#include "checkpoint_h5.h"
#include "io_internal.h"

/* Elements per chunk: 256 Ki floats = 1 MiB, large enough for fast I/O and
 * small enough that a damaged chunk names a small region. */
#define CHUNK_ELEMS ((hsize_t)1 << 18)

struct par_ckpt {
  MPI_Comm comm; /* borrowed */
  int rank, size;
  hid_t file;
  int writing;
  double timeout_s; /* status exchanges: 0 waits forever */
  io_deadline_t *dl; /* the watcher of HDF5's collective steps (NULL: none) */
  int stuck;        /* a status exchange timed out: the ranks no longer agree */
  char *path, *tmp;
  char err[1024];
};

static void ckpt_free(par_ckpt_t *c) {
  if (!c) return;
  io_deadline_stop(c->dl);
  free(c->path);
  free(c->tmp);
  free(c);
}

/* Makes rc and the error message of the failing rank (lowest status, then
 * lowest rank) the result of every rank. */
static int sync_status(par_ckpt_t *c, int rc) {
  struct {
    int rc, rank;
  } in = {rc, c->rank}, out;
  if (c->size == 1) return rc;
  io_deadline_pause(c->dl); /* this wait has a timeout of its own */
  MPI_Request rq;
  if (MPI_Iallreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, c->comm, &rq) != MPI_SUCCESS) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': MPI_Iallreduce failed", c->path);
    return STRATA_EMPI;
  }
  double deadline = MPI_Wtime() + c->timeout_s;
  for (int done = 0; !done;) {
    if (MPI_Test(&rq, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      snprintf(c->err, sizeof c->err, "checkpoint '%s': MPI_Test failed", c->path);
      return STRATA_EMPI;
    }
    if (!done && c->timeout_s > 0 && MPI_Wtime() > deadline) {
      /* The request stays pending: the job cannot go on, its caller ends it. */
      char own[512];
      snprintf(own, sizeof own, "%.500s", rc != STRATA_OK ? c->err : "");
      int k = snprintf(c->err, sizeof c->err,
                       "checkpoint '%s': rank %d waited %.0f s for the other ranks to report how "
                       "their part went; one of them is stuck (a failed write inside an HDF5 "
                       "collective, or a stopped rank)",
                       c->path, c->rank, c->timeout_s);
      if (rc != STRATA_OK && k > 0 && (size_t)k < sizeof c->err)
        snprintf(c->err + k, sizeof c->err - (size_t)k, "; this rank's own error: %.400s", own);
      c->stuck = 1;
      return STRATA_ETIMEOUT;
    }
    if (!done) {
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
  }
  io_deadline_feed(c->dl, NULL);
  if (out.rc != STRATA_OK) MPI_Bcast(c->err, sizeof c->err, MPI_CHAR, out.rank, c->comm);
  return out.rc;
}

const char *par_ckpt_error(const par_ckpt_t *c) { return c ? c->err : "no checkpoint handle"; }

int par_ckpt_reserve(par_ckpt_t *c, uint64_t bytes) {
  if (!c) return STRATA_EINVAL;
  int rc = STRATA_OK;
  if (!c->writing) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': reserve on a checkpoint opened for reading",
             c->path);
    rc = STRATA_ESTATE;
  } else if (c->rank == 0 && bytes > 0) {
    char why[400];
    if ((rc = io_reserve(c->tmp, bytes, why, sizeof why)) != STRATA_OK)
      snprintf(c->err, sizeof c->err, "checkpoint '%s': %s", c->path, why);
  }
  return sync_status(c, rc);
}

/* Gives back the blocks of the .tmp file (rank 0): after a commit, those
 * reserved beyond its end; when abandoned, all of them, so that closing it
 * (which flushes HDF5's metadata) does not fail on the disk it filled. */
static void release_blocks(par_ckpt_t *c, int all) {
  if (c->rank == 0) io_release(c->tmp, all);
}

static int ckpt_new(const char *path, MPI_Comm comm, int writing, double timeout_s,
                    par_ckpt_t **out, char *err, size_t errlen) {
  par_ckpt_t *c = calloc(1, sizeof *c);
  size_t n = path ? strlen(path) : 0;
  if (!c || !path || !(c->path = strdup(path)) || !(c->tmp = malloc(n + 5))) {
    if (err && errlen) snprintf(err, errlen, "checkpoint: %s", path ? "out of memory" : "no path");
    ckpt_free(c);
    return path ? STRATA_ENOMEM : STRATA_EINVAL;
  }
  snprintf(c->tmp, n + 5, "%s.tmp", path);
  c->comm = comm, c->file = -1, c->writing = writing;
  MPI_Comm_rank(comm, &c->rank);
  MPI_Comm_size(comm, &c->size);
  c->timeout_s = timeout_s > 0 ? timeout_s : 0;
  if (c->size > 1) c->dl = io_deadline_start(c->timeout_s);
  io_deadline_feed(c->dl, "checkpoint '%s': %s", path, writing ? "creating its .tmp file" : "opening");
  *out = c;
  return STRATA_OK;
}

static hid_t mpio_fapl(MPI_Comm comm) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return -1;
  /* 1.8+ format: superblock, object headers and B-trees carry checksums,
   * so damaged metadata is detected too, not only damaged data. */
  if (H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) < 0 ||
      H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0) {
    H5Pclose(fapl);
    return -1;
  }
  return fapl;
}

/* The end of create and open: agree on the outcome across ranks; on failure
 * copy the message out and release everything, else hand the checkpoint over. */
static int ckpt_settle(par_ckpt_t *c, int rc, par_ckpt_t **out, char *err, size_t errlen) {
  rc = sync_status(c, rc);
  if (rc != STRATA_OK) {
    if (err && errlen) snprintf(err, errlen, "%s", c->err);
    if (c->file >= 0) H5Fclose(c->file);
    ckpt_free(c);
    return rc;
  }
  *out = c;
  return STRATA_OK;
}

int par_ckpt_create(const char *path, MPI_Comm comm, double timeout_s, par_ckpt_t **out, char *err,
                    size_t errlen) {
  par_ckpt_t *c = NULL;
  char h5[256];
  hid_t fapl = -1, fcpl = -1;
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  H5_QUIET();
  int rc = ckpt_new(path, comm, 1, timeout_s, &c, err, errlen);
  if (rc != STRATA_OK) return rc;
  fapl = mpio_fapl(comm);
  fcpl = H5Pcreate(H5P_FILE_CREATE);
  if (fcpl >= 0) H5Pset_attr_phase_change(fcpl, 0, 0); /* recipe text may exceed 64 KiB */
  errno = 0;
  if (fapl < 0 || fcpl < 0 || (c->file = H5Fcreate(c->tmp, H5F_ACC_TRUNC, fcpl, fapl)) < 0) {
    int e = errno;
    snprintf(c->err, sizeof c->err, "checkpoint '%s': cannot create '%s': %s", path, c->tmp,
             e ? strerror(e) : h5_last_error(h5, sizeof h5));
    rc = STRATA_EIO;
  }
  if (fcpl >= 0) H5Pclose(fcpl);
  if (fapl >= 0) H5Pclose(fapl);
  return ckpt_settle(c, rc, out, err, errlen);
}

int par_ckpt_open(const char *path, MPI_Comm comm, double timeout_s, par_ckpt_t **out, char *err,
                  size_t errlen) {
  par_ckpt_t *c = NULL;
  char h5[256];
  struct stat sb;
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  H5_QUIET();
  int rc = ckpt_new(path, comm, 0, timeout_s, &c, err, errlen);
  if (rc != STRATA_OK) return rc;
  hid_t fapl = mpio_fapl(comm);
  if (stat(path, &sb) != 0) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': %s", path, strerror(errno));
    rc = STRATA_EIO;
  } else if (fapl < 0 || (c->file = H5Fopen(path, H5F_ACC_RDONLY, fapl)) < 0) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': not a complete HDF5 file (%s)", path,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_ECORRUPT;
  }
  if (fapl >= 0) H5Pclose(fapl);
  return ckpt_settle(c, rc, out, err, errlen);
}

static int64_t total_of(int ndim, const int64_t *shape) {
  int64_t t = 1;
  for (int i = 0; i < ndim; i++) t *= shape[i];
  return t;
}

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
  size_t k = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < ndim && k < len; i++)
    k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (k < len) snprintf(buf + k, len - k, "]");
}

/* Checks name/shape/range arguments (locally; the caller reduces). */
static int check_args(par_ckpt_t *c, const char *what, const char *name, int ndim,
                      const int64_t *shape, int64_t offset, int64_t count, const void *data) {
  if (!name || !*name || ndim < 1 || ndim > PAR_CKPT_MAX_DIMS || !shape) {
    snprintf(c->err, sizeof c->err, "checkpoint %s: bad name or rank (ndim %d)", what, ndim);
    return STRATA_EINVAL;
  }
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 1) {
      snprintf(c->err, sizeof c->err, "checkpoint %s '%s': dimension %d is %lld", what, name, i,
               (long long)shape[i]);
      return STRATA_EINVAL;
    }
  int64_t total = total_of(ndim, shape);
  if (offset < 0 || count < 0 || offset + count > total || (count > 0 && !data)) {
    snprintf(c->err, sizeof c->err,
             "checkpoint %s '%s': range [%lld, %lld) outside the %lld elements", what, name,
             (long long)offset, (long long)(offset + count), (long long)total);
    return STRATA_EINVAL;
  }
  return STRATA_OK;
}

/* Adds the flat range [a, b) of the sub-array dims[level..] at the fixed
 * leading indices pre[0..level) to the selection of space. */
static herr_t select_range(hid_t space, int ndim, const hsize_t *dims, hsize_t *pre, int level,
                           hsize_t a, hsize_t b, int *first) {
  hsize_t start[PAR_CKPT_MAX_DIMS], cnt[PAR_CKPT_MAX_DIMS], inner = 1;
  if (a >= b) return 0;
  if (level < 0 || level >= ndim || ndim > PAR_CKPT_MAX_DIMS) return -1;
  for (int i = level + 1; i < ndim; i++) inner *= dims[i];
  if (level < ndim - 1 && a % inner) { /* partial leading row: recurse into it */
    hsize_t row = a / inner, end = (row + 1) * inner < b ? (row + 1) * inner : b;
    pre[level] = row;
    if (select_range(space, ndim, dims, pre, level + 1, a - row * inner, end - row * inner,
                     first) < 0)
      return -1;
    a = end;
  }
  hsize_t rows = (b - a) / inner;
  if (rows > 0) { /* whole rows of this level */
    for (int i = 0; i < level; i++) start[i] = pre[i], cnt[i] = 1;
    start[level] = a / inner, cnt[level] = rows;
    for (int i = level + 1; i < ndim; i++) start[i] = 0, cnt[i] = dims[i];
    if (H5Sselect_hyperslab(space, *first ? H5S_SELECT_SET : H5S_SELECT_OR, start, NULL, cnt,
                            NULL) < 0)
      return -1;
    *first = 0;
    a += rows * inner;
  }
  if (a < b) { /* partial trailing row */
    hsize_t row = a / inner;
    pre[level] = row;
    return select_range(space, ndim, dims, pre, level + 1, 0, b - row * inner, first);
  }
  return 0;
}

/* The union of flat ranges [offsets[i], offsets[i] + counts[i]) (ascending
 * and disjoint, so that the selection's row-major order is theirs). */
static herr_t select_flat(hid_t space, int ndim, const hsize_t *dims, int n, const int64_t *offsets,
                          const int64_t *counts) {
  hsize_t pre[PAR_CKPT_MAX_DIMS] = {0};
  int first = 1;
  for (int i = 0; i < n; i++)
    if (counts[i] > 0 && select_range(space, ndim, dims, pre, 0, (hsize_t)offsets[i],
                                      (hsize_t)(offsets[i] + counts[i]), &first) < 0)
      return -1;
  return first ? H5Sselect_none(space) : 0;
}

/* The ranges' total, or -1 when one lies outside [0, total) or they are
 * not ascending and disjoint. */
static int64_t ranges_total(int n, const int64_t *offsets, const int64_t *counts, int64_t total) {
  int64_t sum = 0, end = 0;
  for (int i = 0; i < n; i++) {
    if (counts[i] < 0 || offsets[i] < end || offsets[i] + counts[i] > total) return -1;
    if (counts[i] > 0) end = offsets[i] + counts[i];
    sum += counts[i];
  }
  return sum;
}

/* check_args for a list of ranges: their total, or -1 with c->err set. */
static int64_t ranges_arg(par_ckpt_t *c, const char *what, const char *name, int ndim, const int64_t *shape,
                          int n, const int64_t *offsets, const int64_t *counts, const void *data) {
  if (n == 1 && offsets && counts) /* one range: check_args names it */
    return check_args(c, what, name, ndim, shape, offsets[0], counts[0], data) != STRATA_OK ? -1 : counts[0];
  if (check_args(c, what, name, ndim, shape, 0, 0, NULL) != STRATA_OK) return -1;
  int64_t total = total_of(ndim, shape), sum = n >= 1 && offsets && counts ? ranges_total(n, offsets, counts, total) : -1;
  if (sum < 0 || (sum > 0 && !data)) {
    snprintf(c->err, sizeof c->err,
             "checkpoint %s '%s': %d ranges not ascending, disjoint and inside the %lld elements (or no data)", what,
             name, n, (long long)total);
    return -1;
  }
  return sum;
}

int par_ckpt_write(par_ckpt_t *c, const char *name, int ndim, const int64_t *shape,
                   int64_t offset, int64_t count, const float *data) {
  return par_ckpt_write_ranges(c, name, ndim, shape, 1, &offset, &count, data);
}

int par_ckpt_write_ranges(par_ckpt_t *c, const char *name, int ndim, const int64_t *shape, int nranges,
                          const int64_t *offsets, const int64_t *counts, const float *data) {
  char h5[256];
  hid_t space = -1, mem = -1, dcpl = -1, lcpl = -1, ds = -1, xfer = -1;
  hsize_t dims[PAR_CKPT_MAX_DIMS], chunk[PAR_CKPT_MAX_DIMS];
  if (!c) return STRATA_EINVAL;
  io_deadline_feed(c->dl, "checkpoint '%s': writing '%s'", c->path, name ? name : "?");
  H5_QUIET();
  int64_t count = ranges_arg(c, "write", name, ndim, shape, nranges, offsets, counts, data);
  hsize_t n = count > 0 ? (hsize_t)count : 1;
  int rc = count < 0 ? STRATA_EINVAL : c->writing ? STRATA_OK : STRATA_ESTATE;
  if (rc == STRATA_ESTATE)
    snprintf(c->err, sizeof c->err, "checkpoint '%s': opened for reading", c->path);
  if ((rc = sync_status(c, rc)) != STRATA_OK) return rc;
  /* Chunks: whole trailing dimensions, enough leading rows for ~1 MiB. */
  hsize_t inner = 1;
  for (int i = 0; i < ndim; i++) dims[i] = (hsize_t)shape[i];
  for (int i = ndim - 1; i >= 1; i--) {
    chunk[i] = dims[i];
    inner *= dims[i];
  }
  chunk[0] = inner >= CHUNK_ELEMS ? 1 : CHUNK_ELEMS / inner;
  if (chunk[0] > dims[0]) chunk[0] = dims[0];
  if (inner > ((hsize_t)1 << 30)) {
    snprintf(c->err, sizeof c->err, "checkpoint write '%s': rows of %llu elements are too long",
             name, (unsigned long long)inner);
    return sync_status(c, STRATA_EINVAL);
  }
  if ((space = H5Screate_simple(ndim, dims, NULL)) < 0 || (mem = H5Screate_simple(1, &n, NULL)) < 0 ||
      (dcpl = H5Pcreate(H5P_DATASET_CREATE)) < 0 || (lcpl = H5Pcreate(H5P_LINK_CREATE)) < 0 ||
      (xfer = H5Pcreate(H5P_DATASET_XFER)) < 0 || H5Pset_chunk(dcpl, ndim, chunk) < 0 ||
      H5Pset_fletcher32(dcpl) < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0 ||
      H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE) < 0)
    goto h5fail;
  if ((ds = H5Dcreate2(c->file, name, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT)) < 0)
    goto h5fail;
  if (select_flat(space, ndim, dims, nranges, offsets, counts) < 0) goto h5fail;
  if (count == 0 && H5Sselect_none(mem) < 0) goto h5fail;
  if (H5Dwrite(ds, H5T_NATIVE_FLOAT, mem, space, xfer, data) < 0) goto h5fail;
  goto done;
h5fail:
  snprintf(c->err, sizeof c->err, "checkpoint '%s': writing '%s': %s", c->path, name,
           h5_last_error(h5, sizeof h5));
  rc = STRATA_EHDF5;
done:
  if (ds >= 0) H5Dclose(ds);
  if (xfer >= 0) H5Pclose(xfer);
  if (lcpl >= 0) H5Pclose(lcpl);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (mem >= 0) H5Sclose(mem);
  if (space >= 0) H5Sclose(space);
  return sync_status(c, rc);
}

/* H5Lexists fails (instead of answering no) when a parent group is missing. */
static int link_exists(hid_t f, const char *name) {
  char *p = strdup(name);
  int ok = p != NULL;
  for (char *s = p ? strchr(p + 1, '/') : NULL; ok && s; s = strchr(s + 1, '/')) {
    *s = 0;
    ok = H5Lexists(f, p, H5P_DEFAULT) > 0;
    *s = '/';
  }
  if (ok) ok = H5Lexists(f, p, H5P_DEFAULT) > 0;
  free(p);
  return ok;
}

/* Opens dataset name and reads its shape (local). */
static int stored_shape(par_ckpt_t *c, const char *name, hid_t *ds, int *ndim, int64_t *shape) {
  char h5[256];
  hsize_t d[PAR_CKPT_MAX_DIMS];
  hid_t space = -1;
  int rc = STRATA_OK;
  int ex = link_exists(c->file, name);
  if (!ex) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s' has no array '%s'", c->path, name);
    return STRATA_ENOTFOUND;
  }
  if ((*ds = H5Dopen2(c->file, name, H5P_DEFAULT)) < 0 || (space = H5Dget_space(*ds)) < 0) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': opening '%s': %s", c->path, name,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_ECORRUPT;
    goto done;
  }
  int nd = H5Sget_simple_extent_ndims(space);
  if (nd < 1 || nd > PAR_CKPT_MAX_DIMS || H5Sget_simple_extent_dims(space, d, NULL) < 0) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': '%s' has %d dimensions", c->path, name, nd);
    rc = STRATA_ECORRUPT;
    goto done;
  }
  *ndim = nd;
  for (int i = 0; i < nd; i++) shape[i] = (int64_t)d[i];
done:
  if (space >= 0) H5Sclose(space);
  return rc;
}

int par_ckpt_shape(par_ckpt_t *c, const char *name, int *ndim, int64_t *shape) {
  hid_t ds = -1;
  if (!c || !name || !ndim || !shape) return STRATA_EINVAL;
  H5_QUIET();
  int rc = stored_shape(c, name, &ds, ndim, shape);
  if (ds >= 0) H5Dclose(ds);
  return sync_status(c, rc);
}

int par_ckpt_read(par_ckpt_t *c, const char *name, int ndim, const int64_t *shape,
                  int64_t offset, int64_t count, float *data) {
  return par_ckpt_read_ranges(c, name, ndim, shape, 1, &offset, &count, data);
}

int par_ckpt_read_ranges(par_ckpt_t *c, const char *name, int ndim, const int64_t *shape, int nranges,
                         const int64_t *offsets, const int64_t *counts, float *data) {
  char h5[256], a[96], b[96];
  hid_t ds = -1, space = -1, mem = -1;
  int snd = 0;
  int64_t sshape[PAR_CKPT_MAX_DIMS];
  hsize_t dims[PAR_CKPT_MAX_DIMS];
  if (!c) return STRATA_EINVAL;
  H5_QUIET();
  int64_t count = ranges_arg(c, "read", name, ndim, shape, nranges, offsets, counts, data);
  hsize_t n = count > 0 ? (hsize_t)count : 1;
  int rc = count < 0 ? STRATA_EINVAL : STRATA_OK;
  if (rc == STRATA_OK) rc = stored_shape(c, name, &ds, &snd, sshape);
  if (rc == STRATA_OK) {
    int same = snd == ndim;
    for (int i = 0; same && i < ndim; i++) same = sshape[i] == shape[i];
    if (!same) {
      shape_str(a, sizeof a, snd, sshape);
      shape_str(b, sizeof b, ndim, shape);
      snprintf(c->err, sizeof c->err,
               "checkpoint '%s': array '%s' has shape %s, the model expects %s", c->path, name, a,
               b);
      rc = STRATA_ESHAPE;
    }
  }
  if (rc == STRATA_OK && count > 0) {
    for (int i = 0; i < ndim; i++) dims[i] = (hsize_t)shape[i];
    if ((space = H5Dget_space(ds)) < 0 || (mem = H5Screate_simple(1, &n, NULL)) < 0 ||
        select_flat(space, ndim, dims, nranges, offsets, counts) < 0) {
      snprintf(c->err, sizeof c->err, "checkpoint '%s': selecting in '%s': %s", c->path, name,
               h5_last_error(h5, sizeof h5));
      rc = STRATA_EHDF5;
    } else if (H5Dread(ds, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, data) < 0) {
      snprintf(c->err, sizeof c->err,
               "checkpoint '%s': array '%s' failed its checksum or could not be read (%s)",
               c->path, name, h5_last_error(h5, sizeof h5));
      rc = STRATA_ECORRUPT;
    }
  }
  if (mem >= 0) H5Sclose(mem);
  if (space >= 0) H5Sclose(space);
  if (ds >= 0) H5Dclose(ds);
  return sync_status(c, rc);
}

/* Broadcasts rank 0's string so that every rank writes the same attribute
 * (parallel HDF5 requires identical metadata writes). *out: malloc'd. */
static int bcast_str(par_ckpt_t *c, const char *value, char **out) {
  long long n = c->rank == 0 ? (long long)strlen(value) : 0;
  *out = NULL;
  if (c->size > 1) MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, c->comm);
  else n = (long long)strlen(value);
  char *s = malloc((size_t)n + 1);
  int ok = s != NULL, all = ok;
  if (c->size > 1) MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, c->comm);
  if (!all) {
    free(s);
    snprintf(c->err, sizeof c->err, "checkpoint '%s': out of memory for a string attribute", c->path);
    return STRATA_ENOMEM;
  }
  if (c->rank == 0) memcpy(s, value, (size_t)n);
  if (c->size > 1 && n > 0) {
    for (long long o = 0; o < n; o += 1 << 30) {
      int len = (int)(n - o < (1 << 30) ? n - o : (1 << 30));
      MPI_Bcast(s + o, len, MPI_CHAR, 0, c->comm);
    }
  }
  s[n] = 0;
  *out = s;
  return STRATA_OK;
}

int par_ckpt_set_str(par_ckpt_t *c, const char *name, const char *value) {
  char h5[256], *v = NULL;
  if (!c) return STRATA_EINVAL;
  io_deadline_feed(c->dl, "checkpoint '%s': writing attribute '%s'", c->path, name ? name : "?");
  H5_QUIET();
  int rc = (!name || !*name || !value) ? STRATA_EINVAL : c->writing ? STRATA_OK : STRATA_ESTATE;
  if (rc != STRATA_OK)
    snprintf(c->err, sizeof c->err, "checkpoint '%s': set_str: %s", c->path,
             rc == STRATA_ESTATE ? "opened for reading" : "bad name or value");
  if ((rc = sync_status(c, rc)) != STRATA_OK) return rc;
  if ((rc = bcast_str(c, value, &v)) != STRATA_OK) {
    snprintf(c->err, sizeof c->err, "checkpoint: out of memory");
    return rc;
  }
  if (h5_set_str_attr(c->file, name, v) < 0) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': attribute '%s': %s", c->path, name,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_EHDF5;
  }
  free(v);
  return sync_status(c, rc);
}

int par_ckpt_set_i64(par_ckpt_t *c, const char *name, const int64_t *values, int n) {
  char h5[256];
  hid_t space = -1, attr = -1;
  int64_t *v = NULL;
  if (!c) return STRATA_EINVAL;
  io_deadline_feed(c->dl, "checkpoint '%s': writing attribute '%s'", c->path, name ? name : "?");
  H5_QUIET();
  int rc = (!name || !*name || n < 1 || !values) ? STRATA_EINVAL
           : c->writing                           ? STRATA_OK
                                                  : STRATA_ESTATE;
  if (rc != STRATA_OK)
    snprintf(c->err, sizeof c->err, "checkpoint '%s': set_i64: %s", c->path,
             rc == STRATA_ESTATE ? "opened for reading" : "bad name or count");
  if ((rc = sync_status(c, rc)) != STRATA_OK) return rc;
  if (!(v = malloc((size_t)n * sizeof *v))) {
    rc = STRATA_ENOMEM;
    snprintf(c->err, sizeof c->err, "checkpoint '%s': attribute '%s': out of memory", c->path, name);
  }
  if ((rc = sync_status(c, rc)) != STRATA_OK) return rc;
  memcpy(v, values, (size_t)n * sizeof *v);
  if (c->size > 1) MPI_Bcast(v, n, MPI_INT64_T, 0, c->comm);
  hsize_t dims = (hsize_t)n;
  if ((H5Aexists(c->file, name) > 0 && H5Adelete(c->file, name) < 0) ||
      (space = H5Screate_simple(1, &dims, NULL)) < 0 ||
      (attr = H5Acreate2(c->file, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)) < 0 ||
      H5Awrite(attr, H5T_NATIVE_INT64, v) < 0) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': attribute '%s': %s", c->path, name,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_EHDF5;
  }
  if (attr >= 0) H5Aclose(attr);
  if (space >= 0) H5Sclose(space);
  free(v);
  return sync_status(c, rc);
}

/* 0 when the attribute is there; else STRATA_ENOTFOUND, or STRATA_ECORRUPT
 * when the file's attributes cannot be read (a failed object-header
 * checksum: damage, not absence). */
static int attr_missing(par_ckpt_t *c, const char *name) {
  char h5[256];
  htri_t r = H5Aexists(c->file, name);
  if (r > 0) return 0;
  if (r < 0) {
    snprintf(c->err, sizeof c->err,
             "checkpoint '%s' is damaged: its attributes cannot be read looking for '%s' (%s)", c->path, name,
             h5_last_error(h5, sizeof h5));
    return STRATA_ECORRUPT;
  }
  snprintf(c->err, sizeof c->err, "checkpoint '%s' has no attribute '%s'", c->path, name);
  return STRATA_ENOTFOUND;
}

int par_ckpt_get_str(par_ckpt_t *c, const char *name, char **value) {
  char h5[256];
  if (!c || !name || !value) return STRATA_EINVAL;
  H5_QUIET();
  *value = NULL;
  int rc = STRATA_OK;
  if ((rc = attr_missing(c, name))) {
  } else if (!(*value = h5_get_str_attr(c->file, name))) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s' is damaged: attribute '%s' is not a readable string (%s)",
             c->path, name, h5_last_error(h5, sizeof h5));
    rc = STRATA_ECORRUPT;
  }
  rc = sync_status(c, rc);
  if (rc != STRATA_OK) {
    free(*value);
    *value = NULL;
  }
  return rc;
}

int par_ckpt_get_i64(par_ckpt_t *c, const char *name, int64_t *values, int n) {
  char h5[256];
  hid_t attr = -1, space = -1;
  if (!c || !name || !values || n < 1) return STRATA_EINVAL;
  H5_QUIET();
  int rc = STRATA_OK;
  if ((rc = attr_missing(c, name))) {
  } else if ((attr = H5Aopen(c->file, name, H5P_DEFAULT)) < 0 ||
             (space = H5Aget_space(attr)) < 0) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s' is damaged: attribute '%s': %s", c->path, name,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_ECORRUPT;
  } else if (H5Sget_simple_extent_npoints(space) != n) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': attribute '%s' holds %lld values, not %d",
             c->path, name, (long long)H5Sget_simple_extent_npoints(space), n);
    rc = STRATA_ESHAPE;
  } else if (H5Aread(attr, H5T_NATIVE_INT64, values) < 0) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s' is damaged: attribute '%s': %s", c->path, name,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_ECORRUPT;
  }
  if (space >= 0) H5Sclose(space);
  if (attr >= 0) H5Aclose(attr);
  return sync_status(c, rc);
}

int par_ckpt_expect_str(par_ckpt_t *c, const char *name, const char *expected) {
  char *v = NULL;
  if (!c || !name || !expected) return STRATA_EINVAL;
  int rc = par_ckpt_get_str(c, name, &v);
  if (rc == STRATA_OK && strcmp(v, expected) != 0) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': %s is '%s', expected '%s'", c->path, name,
             v, expected);
    rc = STRATA_ESHAPE;
  }
  free(v);
  return rc; /* every rank read the same attribute */
}

/* fsync a file or directory by path (best effort for directories). */
static int sync_path(const char *path, int dir) {
  int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return dir ? 0 : -1;
  int r = fsync(fd);
  close(fd);
  return dir ? 0 : r;
}

int par_ckpt_commit(par_ckpt_t *c) {
  char h5[256];
  if (!c) return STRATA_EINVAL;
  io_deadline_feed(c->dl, "checkpoint '%s': closing its .tmp file", c->path);
  H5_QUIET();
  int rc = STRATA_OK;
  if (!c->writing) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': commit of a checkpoint opened for reading",
             c->path);
    rc = STRATA_ESTATE;
  }
  if ((rc = sync_status(c, rc)) != STRATA_OK) return rc;
  herr_t hr = H5Fclose(c->file);
  c->file = -1;
  if (hr < 0) {
    snprintf(c->err, sizeof c->err, "checkpoint '%s': closing '%s': %s", c->path, c->tmp,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_EHDF5;
  }
  rc = sync_status(c, rc);
  if (rc == STRATA_OK) release_blocks(c, 0);
  if (rc == STRATA_OK && c->rank == 0) {
    if (sync_path(c->tmp, 0) != 0 || rename(c->tmp, c->path) != 0) {
      snprintf(c->err, sizeof c->err, "checkpoint '%s': cannot move '%s' into place: %s",
               c->path, c->tmp, strerror(errno));
      rc = STRATA_EIO;
    } else {
      char *d = strdup(c->path);
      if (d) sync_path(dirname(d), 1);
      free(d);
    }
  }
  if (rc != STRATA_OK && c->rank == 0) unlink(c->tmp);
  rc = sync_status(c, rc);
  c->writing = 0;
  return rc;
}

void par_ckpt_close(par_ckpt_t *c) {
  if (!c) return;
  H5_QUIET();
  io_deadline_feed(c->dl, "checkpoint '%s': closing", c->path);
  if (c->stuck) {
    /* Closing is collective and the other ranks are elsewhere: leave the
     * file to the end of the job, which must now be ended, and its name
     * to no one. */
    if (c->writing && c->rank == 0) unlink(c->tmp);
    ckpt_free(c);
    return;
  }
  if (c->writing) release_blocks(c, 1);
  if (c->file >= 0 && H5Fclose(c->file) < 0) {
    /* A file HDF5 could not close stays open inside it, and its
     * finalisation at exit would flush it again, collectively: close it
     * for good now (every rank is here). */
    H5Fclose(c->file);
  }
  if (c->writing) { /* abandoned: every rank returns once the .tmp is gone */
    if (c->rank == 0) unlink(c->tmp);
    if (c->size > 1) MPI_Barrier(c->comm);
  }
  ckpt_free(c);
}
