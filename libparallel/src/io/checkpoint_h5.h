/* HDF5 helpers shared by metrics.c and checkpoint.c (internal). */
#ifndef STRATA_PAR_CHECKPOINT_H5_H
#define STRATA_PAR_CHECKPOINT_H5_H

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* HDF5 prints its error stack to stderr by default; strata reports errors
 * itself (one line naming the file), so printing is off inside strata's own
 * calls only: H5_QUIET() at the top of a function turns it off and puts the
 * application's setting back when the function returns, whatever the path. */
typedef struct {
  H5E_auto2_t func;
  void *data;
  int saved;
} h5_quiet_t;

static inline h5_quiet_t h5_quiet_begin(void) {
  h5_quiet_t q = {NULL, NULL, 0};
  q.saved = H5Eget_auto2(H5E_DEFAULT, &q.func, &q.data) >= 0;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  return q;
}

static inline void h5_quiet_end(h5_quiet_t *q) {
  if (q->saved) H5Eset_auto2(H5E_DEFAULT, q->func, q->data);
}

#define H5_QUIET() h5_quiet_t h5_quiet_ __attribute__((cleanup(h5_quiet_end))) = h5_quiet_begin()

typedef struct {
  char *buf;
  size_t len;
} h5_msg_t;

static herr_t h5_walk_cb(unsigned n, const H5E_error2_t *e, void *data) {
  h5_msg_t *m = data;
  if (n == 0 && e->desc && *e->desc) snprintf(m->buf, m->len, "%s", e->desc);
  return 0;
}

/* The innermost message of the current HDF5 error stack (the most specific
 * one, e.g. "truncated file: eof = ..."), or "" when the stack is empty, on
 * one line. A failed system call is shortened to its errno and message
 * ("file write failed: No space left on device (errno 28)"): HDF5's own
 * text spans lines and lists buffer addresses. */
static inline const char *h5_last_error(char *buf, size_t len) {
  h5_msg_t m = {buf, len};
  buf[0] = 0;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_walk_cb, &m);
  const char *en = strstr(buf, "errno = "), *em = strstr(buf, "error message = '");
  const char *colon = strchr(buf, ':');
  if (en && em && colon && colon < en) {
    int e = atoi(en + 8);
    char what[128], msg[128];
    snprintf(what, sizeof what, "%.*s", (int)(colon - buf), buf);
    snprintf(msg, sizeof msg, "%s", em + 17);
    char *q = strchr(msg, '\'');
    if (q) *q = 0;
    if (snprintf(buf, len, "%s: %s (errno %d)", what, msg, e) >= (int)len) buf[len - 1] = 0;
  }
  for (char *p = buf; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  return buf;
}

/* Writes a string attribute on obj, replacing an existing one. */
static inline herr_t h5_set_str_attr(hid_t obj, const char *name, const char *value) {
  herr_t rc = -1;
  hid_t type = -1, space = -1, attr = -1;
  size_t n = strlen(value);
  if (H5Aexists(obj, name) > 0 && H5Adelete(obj, name) < 0) goto done;
  if ((type = H5Tcopy(H5T_C_S1)) < 0) goto done;
  if (H5Tset_size(type, n + 1) < 0 || H5Tset_strpad(type, H5T_STR_NULLTERM) < 0) goto done;
  if ((space = H5Screate(H5S_SCALAR)) < 0) goto done;
  if ((attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT)) < 0) goto done;
  if (H5Awrite(attr, type, value) < 0) goto done;
  rc = 0;
done:
  if (attr >= 0) H5Aclose(attr);
  if (space >= 0) H5Sclose(space);
  if (type >= 0) H5Tclose(type);
  return rc;
}

/* Reads a string attribute (fixed or variable length) into a malloc'd
 * string; NULL on failure. */
static inline char *h5_get_str_attr(hid_t obj, const char *name) {
  char *out = NULL;
  hid_t attr = -1, type = -1, mem = -1;
  if ((attr = H5Aopen(obj, name, H5P_DEFAULT)) < 0) goto done;
  if ((type = H5Aget_type(attr)) < 0 || H5Tget_class(type) != H5T_STRING) goto done;
  if (H5Tis_variable_str(type) > 0) {
    char *v = NULL;
    if ((mem = H5Tcopy(H5T_C_S1)) < 0 || H5Tset_size(mem, H5T_VARIABLE) < 0) goto done;
    if (H5Aread(attr, mem, &v) < 0) goto done;
    out = strdup(v ? v : "");
    H5free_memory(v);
  } else {
    size_t n = H5Tget_size(type);
    if ((mem = H5Tcopy(H5T_C_S1)) < 0 || H5Tset_size(mem, n + 1) < 0) goto done;
    if (!(out = calloc(n + 2, 1))) goto done;
    if (H5Aread(attr, mem, out) < 0) {
      free(out);
      out = NULL;
    }
  }
done:
  if (mem >= 0) H5Tclose(mem);
  if (type >= 0) H5Tclose(type);
  if (attr >= 0) H5Aclose(attr);
  return out;
}

#endif
