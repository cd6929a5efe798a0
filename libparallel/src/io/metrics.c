/* Training metrics in HDF5: one extendible float64 dataset per metric at the
 * root of the file, string attributes describing the run.
 *
 * The file is opened and closed around every append: appends are rare
 * (once per logged step) next to a training step, and a closed file is one
 * that h5dump/h5py can read mid-run and that survives a killed run. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <strata/parallel.h>

#include "checkpoint_h5.h"
#include "io_internal.h"

#define CHUNK_ROWS 1024
/* Disk held ahead of the file's end (io_room) before HDF5 writes into it:
 * a full disk is then refused cleanly, while the file is still whole. */
#define HEADROOM ((uint64_t)256 << 10)

struct par_metrics {
  char *path;
  char **names;
  int count;
  hsize_t rows;
  char err[512];
};

static int valid_name(const char *s) {
  return s && *s && !strchr(s, '/') && strcmp(s, ".") != 0;
}

void par_metrics_destroy(par_metrics_t *m) {
  if (!m) return;
  if (m->path) io_release(m->path, 0); /* the headroom held beyond the end */
  for (int i = 0; i < m->count; i++) free(m->names[i]);
  free(m->names);
  free(m->path);
  free(m);
}

const char *par_metrics_error(const par_metrics_t *m) { return m ? m->err : "no metrics handle"; }

/* Opens the file with the library-version bounds strata writes (1.8+
 * format: checksummed metadata, dense storage for large attributes). */
static hid_t open_file(const char *path, unsigned flags) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = -1;
  if (fapl < 0) return -1;
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  f = H5Fopen(path, flags, fapl);
  H5Pclose(fapl);
  return f;
}

int par_metrics_create(const char *path, const char *const *names, int count, par_metrics_t **out,
                       char *err, size_t errlen) {
  int rc = STRATA_OK;
  char msg[512] = "", h5[256];
  hid_t fapl = -1, fcpl = -1, f = -1, space = -1, dcpl = -1, ds = -1;
  par_metrics_t *m = NULL;
  H5_QUIET();
  if (!out || !path || !names || count < 1) {
    snprintf(msg, sizeof msg, "metrics: bad arguments (path %s, %d names)", path ? path : "NULL",
             count);
    rc = STRATA_EINVAL;
    goto fail;
  }
  *out = NULL;
  for (int i = 0; i < count; i++) {
    if (!valid_name(names[i])) {
      snprintf(msg, sizeof msg, "metrics '%s': bad metric name '%s'", path,
               names[i] ? names[i] : "NULL");
      rc = STRATA_EINVAL;
      goto fail;
    }
    for (int j = 0; j < i; j++)
      if (strcmp(names[i], names[j]) == 0) {
        snprintf(msg, sizeof msg, "metrics '%s': metric '%s' named twice", path, names[i]);
        rc = STRATA_EINVAL;
        goto fail;
      }
  }
  if (!(m = calloc(1, sizeof *m)) || !(m->path = strdup(path)) ||
      !(m->names = calloc((size_t)count, sizeof *m->names))) {
    snprintf(msg, sizeof msg, "metrics: out of memory");
    rc = STRATA_ENOMEM;
    goto fail;
  }
  for (int i = 0; i < count; i++) {
    if (!(m->names[i] = strdup(names[i]))) {
      snprintf(msg, sizeof msg, "metrics: out of memory");
      rc = STRATA_ENOMEM;
      goto fail;
    }
    m->count = i + 1;
  }
  char why[400];
  if ((rc = io_room(path, HEADROOM + (uint64_t)count * 4096, why, sizeof why)) != STRATA_OK) {
    snprintf(msg, sizeof msg, "metrics '%s': %s", path, why);
    goto fail;
  }
  fapl = H5Pcreate(H5P_FILE_ACCESS);
  fcpl = H5Pcreate(H5P_FILE_CREATE);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  H5Pset_attr_phase_change(fcpl, 0, 0); /* dense attributes: no 64 KiB limit */
  errno = 0;
  if ((f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl)) < 0) {
    snprintf(msg, sizeof msg, "metrics '%s': cannot create: %s", path,
             errno ? strerror(errno) : h5_last_error(h5, sizeof h5));
    rc = STRATA_EIO;
    goto fail;
  }
  hsize_t dims = 0, maxdims = H5S_UNLIMITED, chunk = CHUNK_ROWS;
  space = H5Screate_simple(1, &dims, &maxdims);
  dcpl = H5Pcreate(H5P_DATASET_CREATE);
  double nan = NAN;
  if (space < 0 || dcpl < 0 || H5Pset_chunk(dcpl, 1, &chunk) < 0 ||
      H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &nan) < 0)
    goto h5fail;
  for (int i = 0; i < count; i++) {
    ds = H5Dcreate2(f, names[i], H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0) goto h5fail;
    hid_t d = ds;
    ds = -1;
    if (H5Dclose(d) < 0) goto h5fail;
  }
  if (H5Fclose(f) < 0) {
    f = -1;
    goto h5fail;
  }
  f = -1;
  *out = m;
  m = NULL;
  goto done;
h5fail:
  snprintf(msg, sizeof msg, "metrics '%s': %s", path, h5_last_error(h5, sizeof h5));
  rc = STRATA_EHDF5;
fail:
  if (err && errlen) snprintf(err, errlen, "%s", msg);
done:
  if (ds >= 0) H5Dclose(ds);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (space >= 0) H5Sclose(space);
  if (f >= 0) H5Fclose(f);
  if (fcpl >= 0) H5Pclose(fcpl);
  if (fapl >= 0) H5Pclose(fapl);
  par_metrics_destroy(m);
  return rc;
}

static int open_existing(const char *path, unsigned flags, hid_t *f, char *msg, size_t ml) {
  struct stat sb;
  char h5[256];
  if (stat(path, &sb) != 0) {
    snprintf(msg, ml, "metrics '%s': %s", path, strerror(errno));
    return STRATA_EIO;
  }
  if ((*f = open_file(path, flags)) < 0) {
    h5_last_error(h5, sizeof h5);
    snprintf(msg, ml, "metrics '%s': not a readable HDF5 file%s%s", path, h5[0] ? ": " : "", h5);
    return STRATA_ECORRUPT;
  }
  return STRATA_OK;
}

int par_metrics_open(const char *path, const char *const *names, int count, size_t keep,
                     par_metrics_t **out, char *err, size_t errlen) {
  struct stat sb;
  char msg[512] = "", h5[256];
  hid_t f = -1, ds = -1, fs = -1;
  par_metrics_t *m = NULL;
  int rc = STRATA_OK;
  H5_QUIET();
  if (!out || !path || !names || count < 1) return STRATA_EINVAL;
  *out = NULL;
  if (stat(path, &sb) != 0) return par_metrics_create(path, names, count, out, err, errlen);
  if ((rc = open_existing(path, H5F_ACC_RDWR, &f, msg, sizeof msg)) != STRATA_OK) goto done;
  hsize_t rows = (hsize_t)keep;
  for (int i = 0; i < count; i++) {
    hsize_t n = 0;
    if (!valid_name(names[i]) || H5Lexists(f, names[i], H5P_DEFAULT) <= 0) {
      snprintf(msg, sizeof msg, "metrics '%s': no metric named '%s' to append to", path,
               names[i] ? names[i] : "NULL");
      rc = STRATA_ENOTFOUND;
      goto done;
    }
    if ((ds = H5Dopen2(f, names[i], H5P_DEFAULT)) < 0 || (fs = H5Dget_space(ds)) < 0 ||
        H5Sget_simple_extent_dims(fs, &n, NULL) != 1) {
      snprintf(msg, sizeof msg, "metrics '%s': '%s' is not a 1-D metric: %s", path, names[i],
               h5_last_error(h5, sizeof h5));
      rc = STRATA_ECORRUPT;
      goto done;
    }
    if (n < rows) rows = n;
    H5Sclose(fs);
    H5Dclose(ds);
    fs = ds = -1;
  }
  for (int i = 0; i < count; i++) {
    if ((ds = H5Dopen2(f, names[i], H5P_DEFAULT)) < 0 || H5Dset_extent(ds, &rows) < 0) {
      snprintf(msg, sizeof msg, "metrics '%s': cannot cut '%s' to %llu rows: %s", path, names[i],
               (unsigned long long)rows, h5_last_error(h5, sizeof h5));
      rc = STRATA_EHDF5;
      goto done;
    }
    H5Dclose(ds);
    ds = -1;
  }
  if (!(m = calloc(1, sizeof *m)) || !(m->path = strdup(path)) ||
      !(m->names = calloc((size_t)count, sizeof *m->names))) {
    snprintf(msg, sizeof msg, "metrics: out of memory");
    rc = STRATA_ENOMEM;
    goto done;
  }
  for (int i = 0; i < count; i++) {
    if (!(m->names[i] = strdup(names[i]))) {
      snprintf(msg, sizeof msg, "metrics: out of memory");
      rc = STRATA_ENOMEM;
      goto done;
    }
    m->count = i + 1;
  }
  m->rows = rows;
  *out = m;
  m = NULL;
done:
  if (fs >= 0) H5Sclose(fs);
  if (ds >= 0) H5Dclose(ds);
  if (f >= 0) H5Fclose(f);
  par_metrics_destroy(m);
  if (rc != STRATA_OK && err && errlen) snprintf(err, errlen, "%s", msg);
  return rc;
}

int par_metrics_append(par_metrics_t *m, const double *values, int rows) {
  int rc = STRATA_OK;
  char h5[256];
  hid_t f = -1, ds = -1, fs = -1, ms = -1;
  double *col = NULL;
  if (!m) return STRATA_EINVAL;
  H5_QUIET();
  if (rows < 0 || (rows > 0 && !values)) {
    snprintf(m->err, sizeof m->err, "metrics append: %d rows", rows);
    return STRATA_EINVAL;
  }
  if (rows == 0) return STRATA_OK;
  if (!(col = malloc((size_t)rows * sizeof *col))) {
    snprintf(m->err, sizeof m->err, "metrics append: out of memory");
    return STRATA_ENOMEM;
  }
  char why[400];
  uint64_t grow = HEADROOM + 4 * (uint64_t)rows * (uint64_t)m->count * sizeof(double);
  if ((rc = io_room(m->path, grow, why, sizeof why)) != STRATA_OK) {
    snprintf(m->err, sizeof m->err, "metrics '%s': %s; the rows written so far are kept", m->path, why);
    free(col);
    return rc;
  }
  if ((f = open_file(m->path, H5F_ACC_RDWR)) < 0) goto h5fail;
  hsize_t start = m->rows, n = (hsize_t)rows, total = m->rows + (hsize_t)rows;
  if ((ms = H5Screate_simple(1, &n, NULL)) < 0) goto h5fail;
  for (int i = 0; i < m->count; i++) {
    for (int r = 0; r < rows; r++) col[r] = values[(size_t)r * (size_t)m->count + (size_t)i];
    if ((ds = H5Dopen2(f, m->names[i], H5P_DEFAULT)) < 0) goto h5fail;
    if (H5Dset_extent(ds, &total) < 0) goto h5fail;
    if ((fs = H5Dget_space(ds)) < 0) goto h5fail;
    if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &n, NULL) < 0) goto h5fail;
    if (H5Dwrite(ds, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, col) < 0) goto h5fail;
    H5Sclose(fs);
    fs = -1;
    /* Closing writes the chunk out of HDF5's cache: a full disk shows here. */
    hid_t d = ds;
    ds = -1;
    if (H5Dclose(d) < 0) goto h5fail;
  }
  hid_t ff = f;
  f = -1;
  if (H5Fclose(ff) < 0) goto h5fail;
  m->rows = total;
  goto done;
h5fail:
  snprintf(m->err, sizeof m->err, "metrics '%s': append failed: %s", m->path,
           h5_last_error(h5, sizeof h5));
  rc = STRATA_EHDF5;
done:
  if (fs >= 0) H5Sclose(fs);
  if (ds >= 0) H5Dclose(ds);
  if (ms >= 0) H5Sclose(ms);
  if (f >= 0) H5Fclose(f);
  free(col);
  return rc;
}

int par_metrics_set_attr(par_metrics_t *m, const char *name, const char *value) {
  char h5[256];
  hid_t f = -1;
  int rc = STRATA_OK;
  if (!m) return STRATA_EINVAL;
  H5_QUIET();
  if (!name || !*name || !value) {
    snprintf(m->err, sizeof m->err, "metrics set_attr: bad name or value");
    return STRATA_EINVAL;
  }
  char why[400];
  if ((rc = io_room(m->path, HEADROOM + 2 * (uint64_t)strlen(value), why, sizeof why)) != STRATA_OK) {
    snprintf(m->err, sizeof m->err, "metrics '%s': attribute '%s': %s", m->path, name, why);
    return rc;
  }
  if ((f = open_file(m->path, H5F_ACC_RDWR)) < 0 || h5_set_str_attr(f, name, value) < 0) {
    snprintf(m->err, sizeof m->err, "metrics '%s': attribute '%s': %s", m->path, name,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_EHDF5;
  }
  if (f >= 0 && H5Fclose(f) < 0 && rc == STRATA_OK) {
    snprintf(m->err, sizeof m->err, "metrics '%s': close: %s", m->path,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_EHDF5;
  }
  return rc;
}

int par_metrics_set_unit(par_metrics_t *m, const char *name, const char *unit) {
  char h5[256], why[400];
  hid_t f = -1, ds = -1;
  int rc = STRATA_OK;
  if (!m) return STRATA_EINVAL;
  H5_QUIET();
  if (!valid_name(name) || !unit || !*unit) {
    snprintf(m->err, sizeof m->err, "metrics set_unit: bad metric name or unit");
    return STRATA_EINVAL;
  }
  if ((rc = io_room(m->path, HEADROOM + 2 * (uint64_t)strlen(unit), why, sizeof why)) != STRATA_OK) {
    snprintf(m->err, sizeof m->err, "metrics '%s': unit of '%s': %s", m->path, name, why);
    return rc;
  }
  if ((f = open_file(m->path, H5F_ACC_RDWR)) < 0) {
    snprintf(m->err, sizeof m->err, "metrics '%s': %s", m->path, h5_last_error(h5, sizeof h5));
    return STRATA_EHDF5;
  }
  if (H5Lexists(f, name, H5P_DEFAULT) <= 0) {
    snprintf(m->err, sizeof m->err, "metrics '%s': no metric named '%s'", m->path, name);
    rc = STRATA_ENOTFOUND;
  } else if ((ds = H5Dopen2(f, name, H5P_DEFAULT)) < 0 || h5_set_str_attr(ds, "unit", unit) < 0) {
    snprintf(m->err, sizeof m->err, "metrics '%s': unit of '%s': %s", m->path, name,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_EHDF5;
  }
  if (ds >= 0) H5Dclose(ds);
  if (H5Fclose(f) < 0 && rc == STRATA_OK) {
    snprintf(m->err, sizeof m->err, "metrics '%s': close: %s", m->path, h5_last_error(h5, sizeof h5));
    rc = STRATA_EHDF5;
  }
  return rc;
}

int par_metrics_read_unit(const char *path, const char *name, char **unit, char *err, size_t errlen) {
  char msg[512] = "", h5[256];
  hid_t f = -1, ds = -1;
  int rc;
  H5_QUIET();
  if (!path || !name || !unit) return STRATA_EINVAL;
  *unit = NULL;
  if ((rc = open_existing(path, H5F_ACC_RDONLY, &f, msg, sizeof msg)) != STRATA_OK) goto done;
  if (H5Lexists(f, name, H5P_DEFAULT) <= 0) {
    snprintf(msg, sizeof msg, "metrics '%s': no metric named '%s'", path, name);
    rc = STRATA_ENOTFOUND;
  } else if ((ds = H5Dopen2(f, name, H5P_DEFAULT)) < 0) {
    snprintf(msg, sizeof msg, "metrics '%s': '%s': %s", path, name, h5_last_error(h5, sizeof h5));
    rc = STRATA_ECORRUPT;
  } else if (H5Aexists(ds, "unit") <= 0) {
    snprintf(msg, sizeof msg, "metrics '%s': '%s' has no unit", path, name);
    rc = STRATA_ENOTFOUND;
  } else if (!(*unit = h5_get_str_attr(ds, "unit"))) {
    snprintf(msg, sizeof msg, "metrics '%s': the unit of '%s' is not a string (%s)", path, name,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_ECORRUPT;
  }
done:
  if (ds >= 0) H5Dclose(ds);
  if (f >= 0) H5Fclose(f);
  if (rc != STRATA_OK && err && errlen) snprintf(err, errlen, "%s", msg);
  return rc;
}

int par_metrics_read(const char *path, const char *name, double **values, size_t *n, char *err,
                     size_t errlen) {
  char msg[512] = "", h5[256];
  hid_t f = -1, ds = -1, fs = -1;
  int rc;
  double *v = NULL;
  H5_QUIET();
  if (!path || !name || !values || !n) return STRATA_EINVAL;
  *values = NULL, *n = 0;
  if ((rc = open_existing(path, H5F_ACC_RDONLY, &f, msg, sizeof msg)) != STRATA_OK) goto done;
  if (H5Lexists(f, name, H5P_DEFAULT) <= 0) {
    snprintf(msg, sizeof msg, "metrics '%s': no metric named '%s'", path, name);
    rc = STRATA_ENOTFOUND;
    goto done;
  }
  hsize_t dims = 0;
  if ((ds = H5Dopen2(f, name, H5P_DEFAULT)) < 0 || (fs = H5Dget_space(ds)) < 0 ||
      H5Sget_simple_extent_ndims(fs) != 1 || H5Sget_simple_extent_dims(fs, &dims, NULL) < 0) {
    snprintf(msg, sizeof msg, "metrics '%s': '%s' is not a 1-D metric: %s", path, name,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_ECORRUPT;
    goto done;
  }
  if (!(v = malloc(dims ? dims * sizeof *v : 1))) {
    snprintf(msg, sizeof msg, "metrics: out of memory");
    rc = STRATA_ENOMEM;
    goto done;
  }
  if (dims && H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) {
    snprintf(msg, sizeof msg, "metrics '%s': reading '%s': %s", path, name,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_ECORRUPT;
    goto done;
  }
  *values = v, *n = (size_t)dims;
  v = NULL;
done:
  free(v);
  if (fs >= 0) H5Sclose(fs);
  if (ds >= 0) H5Dclose(ds);
  if (f >= 0) H5Fclose(f);
  if (rc != STRATA_OK && err && errlen) snprintf(err, errlen, "%s", msg);
  return rc;
}

int par_metrics_read_attr(const char *path, const char *name, char **value, char *err,
                          size_t errlen) {
  char msg[512] = "", h5[256];
  hid_t f = -1;
  int rc;
  H5_QUIET();
  if (!path || !name || !value) return STRATA_EINVAL;
  *value = NULL;
  if ((rc = open_existing(path, H5F_ACC_RDONLY, &f, msg, sizeof msg)) != STRATA_OK) goto done;
  if (H5Aexists(f, name) <= 0) {
    snprintf(msg, sizeof msg, "metrics '%s': no attribute '%s'", path, name);
    rc = STRATA_ENOTFOUND;
  } else if (!(*value = h5_get_str_attr(f, name))) {
    snprintf(msg, sizeof msg, "metrics '%s': attribute '%s' is not a string (%s)", path, name,
             h5_last_error(h5, sizeof h5));
    rc = STRATA_ECORRUPT;
  }
done:
  if (f >= 0) H5Fclose(f);
  if (rc != STRATA_OK && err && errlen) snprintf(err, errlen, "%s", msg);
  return rc;
}

typedef struct {
  char **names;
  int count, cap;
  int oom;
} name_list_t;

static herr_t list_cb(hid_t g, const char *name, const H5L_info_t *info, void *data) {
  name_list_t *l = data;
  H5O_info_t oi;
  if (H5Oget_info_by_name(g, name, &oi, H5P_DEFAULT) < 0 || oi.type != H5O_TYPE_DATASET) return 0;
  if (l->count == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    char **p = realloc(l->names, (size_t)cap * sizeof *p);
    if (!p) return (l->oom = 1, -1);
    l->names = p, l->cap = cap;
  }
  if (!(l->names[l->count] = strdup(name))) return (l->oom = 1, -1);
  l->count++;
  return 0;
}

int par_metrics_names(const char *path, char ***names, int *count, char *err, size_t errlen) {
  char msg[512] = "", h5[256];
  hid_t f = -1;
  name_list_t l = {0};
  int rc;
  H5_QUIET();
  if (!path || !names || !count) return STRATA_EINVAL;
  *names = NULL, *count = 0;
  if ((rc = open_existing(path, H5F_ACC_RDONLY, &f, msg, sizeof msg)) != STRATA_OK) goto done;
  if (H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, NULL, list_cb, &l) < 0) {
    snprintf(msg, sizeof msg, "metrics '%s': %s", path,
             l.oom ? "out of memory" : h5_last_error(h5, sizeof h5));
    rc = l.oom ? STRATA_ENOMEM : STRATA_EHDF5;
    for (int i = 0; i < l.count; i++) free(l.names[i]);
    free(l.names);
    goto done;
  }
  *names = l.names, *count = l.count;
done:
  if (f >= 0) H5Fclose(f);
  if (rc != STRATA_OK && err && errlen) snprintf(err, errlen, "%s", msg);
  return rc;
}
