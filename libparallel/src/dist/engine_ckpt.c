/* The engine's checkpoints: every parameter and every optimizer state is
 * one array with its global shape, whatever the layout that wrote it (each
 * rank writes its own part, and reads the parts its layout needs), so a
 * checkpoint saved under one data-parallel degree and ZeRO stage loads
 * under any other. The names and the layout of the file are written here
 * and in ckpt_names.h, nowhere else. The parts themselves, each rank's
 * ranges of the whole tensors (engine_each_part), also serve the
 * in-memory migration onto other ranks (engine_migrate.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_names.h"
#include "engine_internal.h"

#define CK(call)                                                                                   \
  do {                                                                                             \
    if ((rc = (call)) != STRATA_OK) goto done;                                                     \
  } while (0)

/* This rank's part of view i for array `what` ('p', 'm', 'v'): elements
 * [*off, *off + *cnt) at *data. Stage 0 replicas split every view evenly;
 * sharded stages give their own piece (none: count 0). */
static void part(par_engine_t *e, const int *piece_of, int i, char what, int64_t *off, int64_t *cnt,
                 float **data) {
  const par_gpt_view_t *v = par_gpt_view(e->model, i);
  *off = 0, *cnt = 0, *data = NULL;
  if (e->zero == 0) {
    size_t lo = v->numel * (size_t)e->rank / (size_t)e->size, hi = v->numel * (size_t)(e->rank + 1) / (size_t)e->size;
    int k = piece_of[i]; /* stage 0 holds the whole view as one piece */
    float *p, *g, *m, *s;
    state_piece_ptrs(e, k, &p, &g, &m, &s, NULL);
    float *base = what == 'p' ? p : what == 'm' ? m : s;
    *off = (int64_t)lo, *cnt = (int64_t)(hi - lo), *data = base ? base + lo : NULL;
    return;
  }
  int k = piece_of[i];
  if (k < 0) return;
  float *p, *g, *m, *s;
  state_piece_ptrs(e, k, &p, &g, &m, &s, NULL);
  *off = (int64_t)e->pieces[k].a, *cnt = (int64_t)e->pieces[k].n;
  *data = what == 'p' ? p : what == 'm' ? m : s;
}

/* The global flat ranges that elements [a, a + n) of view v, as this rank
 * holds it, occupy in the whole tensor: under tensor parallelism a row
 * block (column-parallel, the vocabulary), a column block (row-parallel:
 * one range per row) or three row blocks (QKV: this rank's heads of q, k
 * and v); else the same range. Ascending. *nr ranges into off/cnt (room for
 * at least rows + 3: e->ranges). */
static void global_ranges(const par_engine_t *e, const par_gpt_view_t *v, int64_t a, int64_t n, int64_t *off,
                          int64_t *cnt, int *nr) {
  int r = e->tp_rank;
  int64_t cols = v->ndim > 1 ? v->shape[1] : 1, G = v->ndim > 1 ? v->global[1] : 1;
  *nr = 0;
  for (int64_t i = a, end = a + n; i < end;) {
    int64_t g = i, run = end - i; /* global index of local i, and how far it runs on */
    if (v->split == PAR_GPT_SPLIT_ROWS) {
      g = (int64_t)r * (int64_t)v->numel + i;
    } else if (v->split == PAR_GPT_SPLIT_QKV) {
      int64_t blk = (int64_t)v->numel / 3, k = i / blk, o = i % blk;
      g = k * (v->global[0] / 3) * cols + (int64_t)r * blk + o;
      run = blk - o < run ? blk - o : run;
    } else if (v->split == PAR_GPT_SPLIT_COLS) {
      int64_t row = i / cols, col = i % cols;
      g = row * G + (int64_t)r * cols + col;
      run = cols - col < run ? cols - col : run;
    } else if (v->split == PAR_GPT_SPLIT_BLOCK) { /* a rectangle of each part: rows of its columns */
      const par_gpt_block_t *b = &v->block;
      int64_t row = i / cols, col = i % cols, pr = v->shape[0] / b->parts;
      g = ((row / pr) * b->part_rows + b->row0 + row % pr) * G + b->col0 + col;
      run = cols - col < run ? cols - col : run;
    }
    if (*nr > 0 && off[*nr - 1] + cnt[*nr - 1] == g) cnt[*nr - 1] += run;
    else off[*nr] = g, cnt[*nr] = run, (*nr)++;
    i += run;
  }
}

/* Training on a device: HDF5 reads and writes host memory, so the n
 * elements at data (on the device) pass through a host buffer. */
static int view_io_staged(par_engine_t *e, par_ckpt_t *c, int writing, const char *name, const par_gpt_view_t *v,
                          int nr, const int64_t *off, const int64_t *cnt, int64_t n, float *data) {
  float *host = malloc((size_t)n * sizeof *host);
  if (!host) return engine_fail(e, 0, STRATA_ENOMEM, "checkpoint: out of memory staging %s (%lld floats)", name,
                                (long long)n);
  tensor_t h = tensor_view1(host, TENSOR_F32, TENSOR_CPU, n), d = tensor_view1(data, TENSOR_F32, e->device, n);
  /* (the collective write and read run even when a copy failed, so that
   * the other ranks are not left waiting; the status says it failed) */
  int crc = writing ? tensor_copy(e->tc, &h, &d) : STRATA_OK;
  int rc = writing ? par_ckpt_write_ranges(c, name, v->ndim, v->global, nr, off, cnt, host)
                   : par_ckpt_read_ranges(c, name, v->ndim, v->global, nr, off, cnt, host);
  if (!writing && rc == STRATA_OK) crc = tensor_copy(e->tc, &d, &h);
  if (crc != STRATA_OK) {
    engine_fail(e, 0, crc, "checkpoint: %s: %s", name, tensor_last_error(e->tc));
    if (rc == STRATA_OK) rc = crc;
  }
  free(host);
  return rc;
}

/* The region of view i. */
static int view_region(const par_engine_t *e, int i) {
  for (int r = 0; r < e->nregions; r++)
    if (i >= e->regions[r].first_view && i < e->regions[r].first_view + e->regions[r].nviews) return r;
  return e->nregions - 1;
}

/* Whether this rank holds view i (its pipeline stage's regions). */
static int view_held(const par_engine_t *e, int i) { return e->regions[view_region(e, i)].n > 0; }

static int *piece_index(par_engine_t *e) {
  int nv = par_gpt_num_views(e->model);
  int *idx = malloc((size_t)nv * sizeof *idx);
  if (!idx) return NULL;
  for (int i = 0; i < nv; i++) idx[i] = -1;
  for (int k = 0; k < e->npieces; k++) idx[e->pieces[k].view] = k;
  return idx;
}

/* An upper bound of the file's size: the arrays, their chunk checksums and
 * object headers, the attributes (stored twice at most while HDF5's heap
 * grows) and a margin for the superblock, groups and indexes. Measured
 * files stay below it (tests/lua/failures.sh checks). */
static uint64_t file_bytes(par_engine_t *e, const par_attr_t *attrs, int nattrs) {
  uint64_t n = 0, arrays = 0, per = 1 + ((e->state_arrays & 1) ? 1 : 0) + ((e->state_arrays & 2) ? 1 : 0);
  for (int i = 0; i < par_gpt_num_views(e->model); i++) { /* the whole tensors, whatever the split */
    const par_gpt_view_t *v = par_gpt_view(e->model, i);
    n += per * (uint64_t)v->global[0] * (uint64_t)(v->ndim > 1 ? v->global[1] : 1) * sizeof(float);
    arrays += per;
  }
  uint64_t a = 4096 + strlen(e->model_desc) + strlen(e->optim_desc) + strlen(e->layout_desc);
  for (int i = 0; i < nattrs; i++) a += strlen(attrs[i].name) + strlen(attrs[i].value) + 64;
  return n + n / 1024 + arrays * 4096 + 2 * a + (256 << 10);
}

static const char *arrays_of(const par_engine_t *e) {
  return (e->state_arrays & 2) ? "pmv" : (e->state_arrays & 1) ? "pm" : "p";
}

/* What a rank reads of view i: the whole view where its layout keeps it
 * whole (the parameters of stages 0-2, the optimizer state of stage 0;
 * under mixed precision the masters, laid out as the optimizer state),
 * else its piece. */
static void read_part(par_engine_t *e, const int *piece_of, int i, char what, int64_t *off, int64_t *cnt,
                      float **data) {
  int whole = e->zero == 0 || (what == 'p' && e->zero <= 2 && !e->mixed && !e->host_opt);
  if (!whole) {
    part(e, piece_of, i, what, off, cnt, data);
    return;
  }
  const par_gpt_view_t *v = par_gpt_view(e->model, i);
  float *p, *g, *m, *s;
  if (e->zero == 0) state_piece_ptrs(e, piece_of[i], &p, &g, &m, &s, NULL);
  else { /* stages 1-2: the full parameters, at the view's place */
    int r = 0;
    while (r + 1 < e->nregions && (int)i >= e->regions[r + 1].first_view) r++;
    p = state_full_params(e) + e->regions[r].foff + (v->offset - e->regions[r].off);
    m = s = NULL;
  }
  *off = 0, *cnt = (int64_t)v->numel;
  *data = what == 'p' ? p : what == 'm' ? m : s;
}

/* The parts this rank holds, array by array ('p' the parameters, the
 * fp32 masters under mixed precision; 'm', 'v'), view by view: see
 * engine_internal.h. A view of another pipeline stage, the last stage's
 * copy of the tied embedding when writing, a replicated view on tensor
 * ranks other than 0 and a replica block when writing: no range. */
int engine_each_part(par_engine_t *e, int writing, engine_part_fn fn, void *ctx) {
  int *piece_of = piece_index(e), rc = STRATA_OK;
  if (!piece_of) return engine_fail(e, 0, STRATA_ENOMEM, "out of memory");
  for (int i = 0; i < par_gpt_num_views(e->model) && !rc; i++) {
    const par_gpt_view_t *v = par_gpt_view(e->model, i);
    int held = view_held(e, i), r = view_region(e, i);
    if (held && (rc = state_resident(e, r, 1))) break; /* ZeRO-Infinity: the region's optimizer arrays on the host */
    for (const char *w = arrays_of(e); *w && !rc; w++) {
      int64_t a = 0, n = 0, *off = e->ranges, *cnt = e->ranges + v->shape[0] + 3;
      float *d = NULL;
      int nr = 0;
      if (held && !(writing && state_view_is_copy(e, i)))
        (writing ? part : read_part)(e, piece_of, i, *w, &a, &n, &d);
      if (writing && ((v->split == PAR_GPT_SPLIT_NONE && e->tp_rank > 0) ||
                      (v->split == PAR_GPT_SPLIT_BLOCK && v->block.replica)))
        n = 0;
      global_ranges(e, v, a, n, off, cnt, &nr);
      rc = fn(ctx, e, *w, i, nr, off, cnt, d);
    }
    if (held) {
      int rr = state_resident(e, r, 0);
      if (!rc) rc = rr;
    }
  }
  free(piece_of);
  return rc;
}

/* A part at its place in the checkpoint's array of the whole tensor (every
 * rank takes part in every array's collective write or read, with an empty
 * range when it has none). */
typedef struct {
  par_ckpt_t *c;
  int writing, ver;
} ckpt_io_t;

static int ckpt_part(void *ctx, par_engine_t *e, char what, int view, int nr, const int64_t *off,
                     const int64_t *cnt, float *data) {
  ckpt_io_t *io = ctx;
  const par_gpt_view_t *v = par_gpt_view(e->model, view);
  char name[300];
  int64_t zero = 0;
  ckpt_array_name(io->ver, what, e->optim_name, v->name, name, sizeof name);
  if (nr == 0) off = cnt = &zero, nr = 1;
  int64_t n = 0;
  for (int k = 0; k < nr; k++) n += cnt[k];
  /* (ZeRO-Offload on a device: every part is on the host) */
  if (e->device >= 0 && !e->opt_host && data && n > 0) return view_io_staged(e, io->c, io->writing, name, v, nr, off, cnt, n, data);
  return io->writing ? par_ckpt_write_ranges(io->c, name, v->ndim, v->global, nr, off, cnt, data)
                     : par_ckpt_read_ranges(io->c, name, v->ndim, v->global, nr, off, cnt, data);
}

int par_engine_save(par_engine_t *e, const char *path, const par_data_t *data, long step,
                    const par_attr_t *attrs, int nattrs) {
  par_ckpt_t *c = NULL;
  char err[1200] = "";
  if (!e || !path || !data) return STRATA_EINVAL;
  /* Every rank must be here before HDF5's collective file creation, whose
   * waits have no watchdog: a stopped rank is reported now, by libcomm. */
  int rc = e->wsize > 1 ? comm_barrier(ctl_comm(e)) : STRATA_OK;
  if (rc != STRATA_OK)
    return engine_fail(e, 0, rc, "before saving checkpoint '%s': %s", path, comm_last_error(ctl_comm(e)));
  rc = par_ckpt_create(path, e->world, e->opts.collective_timeout_s, &c, err, sizeof err);
  if (rc != STRATA_OK) return engine_fail(e, 1, rc, "%s", err);
  CK(par_ckpt_reserve(c, file_bytes(e, attrs, nattrs)));
  ckpt_io_t io = {.c = c, .writing = 1, .ver = CKPT_FORMAT_VERSION};
  CK(engine_each_part(e, 1, ckpt_part, &io));
  int64_t st = step, pos = (int64_t)par_data_position(data), ost = optim_get_step(e->opt);
  int64_t seed = (int64_t)e->opts.seed, ver = CKPT_FORMAT_VERSION;
  CK(par_ckpt_set_str(c, "format", CKPT_FORMAT));
  CK(par_ckpt_set_i64(c, "format_version", &ver, 1));
  CK(par_ckpt_set_i64(c, "step", &st, 1));
  CK(par_ckpt_set_i64(c, "data_position", &pos, 1));
  CK(par_ckpt_set_i64(c, "optim_step", &ost, 1));
  CK(par_ckpt_set_i64(c, "seed", &seed, 1));
  CK(par_ckpt_set_str(c, "model", e->model_desc));
  CK(par_ckpt_set_str(c, "optim", e->optim_name));
  CK(par_ckpt_set_str(c, "optim_config", e->optim_desc));
  char dd[256];
  CK(par_ckpt_set_str(c, "data", par_data_describe(data, dd, sizeof dd)));
  CK(par_ckpt_set_str(c, "layout", e->layout_desc));
  char l0[32];
  snprintf(l0, sizeof l0, "%.17g", e->loss0);
  CK(par_ckpt_set_str(c, "initial_loss", l0));
  if (e->scaler) { /* fp16: the loss scaler, for an exact resume */
    double sc[3] = {optim_scaler_scale(e->scaler), optim_scaler_good_steps(e->scaler),
                    (double)optim_scaler_skipped(e->scaler)};
    char s[96];
    snprintf(s, sizeof s, "%.9g %.0f %.0f", sc[0], sc[1], sc[2]);
    CK(par_ckpt_set_str(c, "loss_scaler", s));
  }
  for (int i = 0; i < nattrs; i++) CK(par_ckpt_set_str(c, attrs[i].name, attrs[i].value));
  CK(par_ckpt_commit(c));
done:
  /* A timed-out status exchange leaves a rank inside HDF5: only this rank knows. */
  /* (an error of the engine's own, with none from the file, keeps its message) */
  if (rc != STRATA_OK && par_ckpt_error(c)[0]) engine_fail(e, rc != STRATA_ETIMEOUT, rc, "%s", par_ckpt_error(c));
  par_ckpt_close(c);
  return rc;
}

int par_engine_load(par_engine_t *e, const char *path, par_data_t *data, long *step) {
  par_ckpt_t *c = NULL;
  char err[1200] = "", *contents = NULL;
  if (!e || !path || !data || !step) return STRATA_EINVAL;
  int rc = par_ckpt_open(path, e->world, e->opts.collective_timeout_s, &c, err, sizeof err);
  if (rc != STRATA_OK) return engine_fail(e, 1, rc, "%s", err);
  if (par_ckpt_get_str(c, "contents", &contents) == STRATA_OK && !strcmp(contents, "weights")) {
    snprintf(err, sizeof err, "checkpoint '%s' holds weights only (no optimizer state or step, as "
             "strata convert writes them): start from it with model.init", path);
    rc = STRATA_EINVAL;
    goto done;
  }
  int64_t ver = 1; /* format 1 had no version attribute */
  par_ckpt_get_i64(c, "format_version", &ver, 1);
  CK(par_ckpt_expect_str(c, "model", e->model_desc));
  CK(par_ckpt_expect_str(c, "optim", e->optim_name));
  ckpt_io_t io = {.c = c, .writing = 0, .ver = (int)ver};
  CK(engine_each_part(e, 0, ckpt_part, &io));
  int64_t st, pos, ost;
  CK(par_ckpt_get_i64(c, "step", &st, 1));
  CK(par_ckpt_get_i64(c, "data_position", &pos, 1));
  CK(par_ckpt_get_i64(c, "optim_step", &ost, 1));
  char *oc = NULL, *dd = NULL; /* what a resume compares (absent from early checkpoints) */
  e->ckpt_optim[0] = e->ckpt_data[0] = 0;
  if (par_ckpt_get_str(c, "optim_config", &oc) == STRATA_OK) snprintf(e->ckpt_optim, sizeof e->ckpt_optim, "%s", oc);
  if (par_ckpt_get_str(c, "data", &dd) == STRATA_OK) snprintf(e->ckpt_data, sizeof e->ckpt_data, "%s", dd);
  free(oc), free(dd);
  char *l0 = NULL; /* absent from checkpoints of earlier versions */
  if (par_ckpt_get_str(c, "initial_loss", &l0) == STRATA_OK) e->loss0 = strtod(l0, NULL);
  free(l0);
  char *ls = NULL; /* fp16 runs: the loss scaler (a run that was not fp16 starts it afresh) */
  if (e->scaler && par_ckpt_get_str(c, "loss_scaler", &ls) == STRATA_OK) {
    double sc = 0, good = -1, skipped = -1;
    if (sscanf(ls, "%lf %lf %lf", &sc, &good, &skipped) != 3 ||
        optim_scaler_restore(e->scaler, (float)sc, (int)good, (long)skipped) != STRATA_OK) {
      snprintf(err, sizeof err, "checkpoint '%s': loss_scaler = '%s' is not a scale within this run's "
               "range, good steps below its window and a count of skipped steps", path, ls);
      free(ls);
      rc = STRATA_EINVAL;
      goto done;
    }
  }
  free(ls);
  CK(state_sync_lowp(e));
  par_data_set_position(data, (uint64_t)pos);
  optim_set_step(e->opt, (long)ost);
  *step = (long)st;
done:
  free(contents);
  if (rc != STRATA_OK && (err[0] || par_ckpt_error(c)[0]))
    engine_fail(e, 1, rc, "%s", err[0] && !strstr(err, "%") ? err : par_ckpt_error(c));
  par_ckpt_close(c);
  return rc;
}
