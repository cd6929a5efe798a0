/* The engine's checkpoints: every parameter and optimizer state is one
 * array with its global shape, whatever the layout that wrote it, so a
 * checkpoint saved with N ranks loads with any other number. The layout
 * of the file is written here and nowhere else. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* This rank's contiguous share [off, off+cnt) of n elements. */
static void share(size_t n, int rank, int size, int64_t *off, int64_t *cnt) {
  size_t lo = n * (size_t)rank / (size_t)size, hi = n * (size_t)(rank + 1) / (size_t)size;
  *off = (int64_t)lo, *cnt = (int64_t)(hi - lo);
}

#define CK(call)                                                                                   \
  do {                                                                                             \
    if ((rc = (call)) != STRATA_OK) goto done;                                                     \
  } while (0)

/* The arrays of view i: parameters, then the optimizer's state. */
static int view_arrays(par_engine_t *e, int i, char nm[3][300], float *bufs[3]) {
  const par_gpt_view_t *v = par_gpt_view(e->model, i);
  float *params = par_gpt_params(e->model, NULL);
  int k = 0;
  snprintf(nm[k], sizeof nm[k], "params/%s", v->name);
  bufs[k++] = params + v->offset;
  if (e->m) {
    snprintf(nm[k], sizeof nm[k], "optim/m/%s", v->name);
    bufs[k++] = e->m + v->offset;
  }
  if (e->v) {
    snprintf(nm[k], sizeof nm[k], "optim/v/%s", v->name);
    bufs[k++] = e->v + v->offset;
  }
  return k;
}

/* An upper bound of the file's size: the arrays, their chunk checksums and
 * object headers, the attributes (stored twice at most while HDF5's heap
 * grows) and a margin for the superblock, groups and indexes. Measured
 * files stay below it (tests/lua/failures.sh checks). */
static uint64_t file_bytes(par_engine_t *e, const par_attr_t *attrs, int nattrs) {
  uint64_t n = 0, arrays = 0;
  char names[3][300];
  float *bufs[3];
  for (int i = 0; i < e->nt; i++) {
    int k = view_arrays(e, i, names, bufs);
    n += (uint64_t)k * par_gpt_view(e->model, i)->numel * sizeof(float);
    arrays += (uint64_t)k;
  }
  uint64_t a = 4096 + strlen(e->model_desc) + strlen(e->optim_desc) + strlen(e->layout_desc);
  for (int i = 0; i < nattrs; i++) a += strlen(attrs[i].name) + strlen(attrs[i].value) + 64;
  return n + n / 1024 + arrays * 4096 + 2 * a + (256 << 10);
}

int par_engine_save(par_engine_t *e, const char *path, const par_data_t *data, long step,
                    const par_attr_t *attrs, int nattrs) {
  par_ckpt_t *c = NULL;
  char err[1200] = "";
  char names[3][300];
  float *bufs[3];
  if (!e || !path || !data) return STRATA_EINVAL;
  /* Every rank must be here before HDF5's collective file creation, whose
   * waits have no watchdog: a stopped rank is reported now, by libcomm. */
  int rc = e->size > 1 ? comm_barrier(e->comm) : STRATA_OK;
  if (rc != STRATA_OK) return engine_fail(e, 0, rc, "before saving checkpoint '%s': %s", path,
                                          comm_last_error(e->comm));
  rc = par_ckpt_create(path, comm_mpi(e->comm), &c, err, sizeof err);
  if (rc != STRATA_OK) return engine_fail(e, 1, rc, "%s", err);
  par_ckpt_set_timeout(c, e->opts.collective_timeout_s);
  CK(par_ckpt_reserve(c, file_bytes(e, attrs, nattrs)));
  for (int i = 0; i < e->nt; i++) {
    const par_gpt_view_t *v = par_gpt_view(e->model, i);
    int64_t off, cnt;
    share(v->numel, e->rank, e->size, &off, &cnt);
    int k = view_arrays(e, i, names, bufs);
    for (int a = 0; a < k; a++) CK(par_ckpt_write(c, names[a], v->ndim, v->shape, off, cnt, bufs[a] + off));
  }
  int64_t st = step, pos = (int64_t)par_data_position(data), ost = optim_get_step(e->opt);
  int64_t seed = (int64_t)e->opts.seed;
  CK(par_ckpt_set_i64(c, "step", &st, 1));
  CK(par_ckpt_set_i64(c, "data_position", &pos, 1));
  CK(par_ckpt_set_i64(c, "optim_step", &ost, 1));
  CK(par_ckpt_set_i64(c, "seed", &seed, 1));
  CK(par_ckpt_set_str(c, "model", e->model_desc));
  CK(par_ckpt_set_str(c, "optim", e->optim_name));
  CK(par_ckpt_set_str(c, "optim_config", e->optim_desc));
  CK(par_ckpt_set_str(c, "layout", e->layout_desc));
  char l0[32];
  snprintf(l0, sizeof l0, "%.17g", e->loss0);
  CK(par_ckpt_set_str(c, "initial_loss", l0));
  for (int i = 0; i < nattrs; i++) CK(par_ckpt_set_str(c, attrs[i].name, attrs[i].value));
  CK(par_ckpt_commit(c));
done:
  /* A timed-out status exchange leaves a rank inside HDF5: only this rank knows. */
  if (rc != STRATA_OK) engine_fail(e, rc != STRATA_ETIMEOUT, rc, "%s", par_ckpt_error(c));
  par_ckpt_close(c);
  return rc;
}

int par_engine_load(par_engine_t *e, const char *path, par_data_t *data, long *step) {
  par_ckpt_t *c = NULL;
  char err[1200] = "";
  char names[3][300];
  float *bufs[3];
  if (!e || !path || !data || !step) return STRATA_EINVAL;
  int rc = par_ckpt_open(path, comm_mpi(e->comm), &c, err, sizeof err);
  if (rc != STRATA_OK) return engine_fail(e, 1, rc, "%s", err);
  CK(par_ckpt_expect_str(c, "model", e->model_desc));
  CK(par_ckpt_expect_str(c, "optim", e->optim_name));
  for (int i = 0; i < e->nt; i++) { /* every rank reads all: data-parallel replicas */
    const par_gpt_view_t *v = par_gpt_view(e->model, i);
    int k = view_arrays(e, i, names, bufs);
    for (int a = 0; a < k; a++) CK(par_ckpt_read(c, names[a], v->ndim, v->shape, 0, (int64_t)v->numel, bufs[a]));
  }
  int64_t st, pos, ost;
  CK(par_ckpt_get_i64(c, "step", &st, 1));
  CK(par_ckpt_get_i64(c, "data_position", &pos, 1));
  CK(par_ckpt_get_i64(c, "optim_step", &ost, 1));
  char *l0 = NULL; /* absent from checkpoints of earlier versions */
  if (par_ckpt_get_str(c, "initial_loss", &l0) == STRATA_OK) e->loss0 = strtod(l0, NULL);
  free(l0);
  par_data_set_position(data, (uint64_t)pos);
  optim_set_step(e->opt, (long)ost);
  *step = (long)st;
done:
  if (rc != STRATA_OK) engine_fail(e, 1, rc, "%s", par_ckpt_error(c));
  par_ckpt_close(c);
  return rc;
}
