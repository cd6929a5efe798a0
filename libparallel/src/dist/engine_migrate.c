/* The training state moved in memory between layouts (par_engine_migrate,
 * par_engine_get_state): the parts each rank holds of the whole tensors,
 * as the checkpoints see them (engine_each_part), are exchanged over
 * libcomm instead of written to and read from a file.
 *
 * Every array of every view is a range of one global line of positions
 * (array a, view i, element k of the whole tensor: a P + offset_i + k, with
 * offset_i the view's place in the serial model's flat layout and P its
 * parameter count). The ranks that send list the spans of that line they
 * hold (each position held by exactly one of them: the parts a checkpoint
 * writes), the ranks that receive the spans they need (the parts a
 * checkpoint load reads, whole views where the layout keeps them whole);
 * both lists go to every rank (a few spans per view and rank), and every
 * pair of ranks intersects the sender's list with the receiver's in the
 * same ascending order, so that the sender packs and the receiver unpacks
 * the same elements in the same order without any further message. One
 * message per pair then carries them (point-to-point, all posted at once). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* ------------------------------------------------------------ spans */

typedef struct {
  int64_t pos, n; /* [pos, pos + n) of the global line */
  float *at;      /* where this rank holds them (or wants them) */
} run_t;

typedef struct {
  run_t *r;
  size_t n, cap;
  int64_t *offset; /* per view: its first element in the serial flat layout */
  int64_t P;       /* the serial model's parameters */
  char only;       /* collect this array alone ('p', 'm', 'v'); 0: all */
  int bad;         /* a range with no data (an internal error) */
} spans_t;

static int array_index(char what) { return what == 'p' ? 0 : what == 'm' ? 1 : 2; }

static int spans_init(spans_t *s, par_engine_t *e, char only) {
  int nv = par_gpt_num_views(e->model);
  memset(s, 0, sizeof *s);
  s->only = only;
  if (!(s->offset = malloc((size_t)(nv > 0 ? nv : 1) * sizeof *s->offset))) return STRATA_ENOMEM;
  for (int i = 0; i < nv; i++) { /* the views follow one another in the serial layout (par_gpt.h) */
    const par_gpt_view_t *v = par_gpt_view(e->model, i);
    s->offset[i] = s->P;
    s->P += v->global[0] * (v->ndim > 1 ? v->global[1] : 1);
  }
  return STRATA_OK;
}

static void spans_free(spans_t *s) {
  free(s->r), free(s->offset);
  memset(s, 0, sizeof *s);
}

static int spans_add(spans_t *s, int64_t pos, int64_t n, float *at) {
  if (n <= 0) return STRATA_OK;
  if (!at) s->bad = 1;
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    run_t *r = realloc(s->r, cap * sizeof *r);
    if (!r) return STRATA_ENOMEM;
    s->r = r, s->cap = cap;
  }
  s->r[s->n++] = (run_t){.pos = pos, .n = n, .at = at};
  return STRATA_OK;
}

static int collect(void *ctx, par_engine_t *e, char what, int view, int nr, const int64_t *off, const int64_t *cnt,
                   float *data) {
  spans_t *s = ctx;
  int rc = STRATA_OK;
  if (s->only && what != s->only) return STRATA_OK;
  int64_t base = (int64_t)array_index(what) * s->P + s->offset[view], done = 0;
  for (int k = 0; k < nr && !rc; k++) { /* (the ranges' elements lie back to back at data) */
    rc = spans_add(s, base + off[k], cnt[k], data ? data + done : NULL);
    done += cnt[k];
  }
  return rc ? engine_fail(e, 0, rc, "out of memory for the state's spans") : STRATA_OK;
}

static int by_pos(const void *a, const void *b) {
  int64_t x = ((const run_t *)a)->pos, y = ((const run_t *)b)->pos;
  return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------ exchange */

/* Walks the overlaps of a sender's spans a[na] and a receiver's b[nb] (pairs
 * pos, n; ascending, disjoint), in ascending order; with copy, copies each
 * from *src (the sender's: a's elements, or a packed stream when a_at is
 * NULL) to *dst (likewise for b). Returns the elements they share. */
typedef struct {
  float *const *a_at, *const *b_at; /* per span, where its elements are; NULL: a packed stream */
  float *stream;                    /* the packed stream's next element */
} copy_t;

static int64_t overlaps(const int64_t *a, size_t na, const int64_t *b, size_t nb, copy_t *copy) {
  int64_t total = 0;
  for (size_t i = 0, j = 0; i < na && j < nb;) {
    int64_t a0 = a[2 * i], a1 = a0 + a[2 * i + 1], b0 = b[2 * j], b1 = b0 + b[2 * j + 1];
    int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    if (lo < hi) {
      total += hi - lo;
      if (copy) {
        const float *from = copy->a_at ? copy->a_at[i] + (lo - a0) : copy->stream;
        float *to = copy->b_at ? copy->b_at[j] + (lo - b0) : copy->stream;
        memcpy(to, from, (size_t)(hi - lo) * sizeof(float));
        if (!copy->a_at || !copy->b_at) copy->stream += hi - lo;
      }
    }
    if (a1 <= b1) i++;
    else j++;
  }
  return total;
}

/* Messages of at most this many floats (MPI counts are ints). */
#define PIECE_FLOATS ((int64_t)1 << 28)

typedef struct {
  size_t *cnt;      /* per rank: spans (2 int64 each) of its list */
  size_t *displ;    /* per rank: its first int64 in all */
  int64_t *all;     /* every rank's list */
} lists_t;

static void lists_free(lists_t *l) { free(l->cnt), free(l->displ), free(l->all); }

/* Every rank's list of spans mine[n] into l (allgatherv over c). */
static int gather_lists(comm_t *c, const run_t *mine, size_t n, lists_t *l, char *err, size_t errlen) {
  int P = comm_size(c), rc;
  int64_t *flat = malloc((2 * n + 1) * sizeof *flat);
  l->cnt = malloc((size_t)P * sizeof *l->cnt), l->displ = malloc((size_t)P * sizeof *l->displ);
  int64_t *counts = malloc((size_t)P * sizeof *counts), here = (int64_t)(2 * n);
  if (!flat || !l->cnt || !l->displ || !counts) {
    free(flat), free(counts);
    snprintf(err, errlen, "out of memory for the state's spans");
    return STRATA_ENOMEM;
  }
  for (size_t k = 0; k < n; k++) flat[2 * k] = mine[k].pos, flat[2 * k + 1] = mine[k].n;
  rc = comm_allgather(c, counts, &here, 1, COMM_I64);
  size_t total = 0;
  for (int r = 0; r < P && !rc; r++) l->cnt[r] = (size_t)counts[r], l->displ[r] = total, total += l->cnt[r];
  if (!rc && !(l->all = malloc((total + 1) * sizeof *l->all))) rc = STRATA_ENOMEM;
  if (!rc) rc = comm_allgatherv(c, l->all, flat, l->cnt, COMM_I64);
  for (int r = 0; r < P; r++) l->cnt[r] /= 2; /* spans, not int64 */
  if (rc) snprintf(err, errlen, "exchanging the state's spans: %s", rc == STRATA_ENOMEM ? "out of memory" : comm_last_error(c));
  free(flat), free(counts);
  return rc;
}

static int by_first(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Whether the senders' spans (every rank's in src) overlap somewhere. */
static int senders_overlap(const lists_t *src, int P) {
  size_t n = 0;
  for (int r = 0; r < P; r++) n += src->cnt[r];
  int64_t *all = malloc((2 * n + 1) * sizeof *all);
  if (!all) return -1;
  memcpy(all, src->all, 2 * n * sizeof *all);
  qsort(all, n, 2 * sizeof *all, by_first);
  int bad = 0;
  for (size_t k = 1; k < n && !bad; k++) bad = all[2 * (k - 1)] + all[2 * (k - 1) + 1] > all[2 * k];
  free(all);
  return bad;
}

/* Moves what every rank sends (src: its spans, sorted) to every rank that
 * receives it (dst: its spans, sorted), over c. Collective. On failure err
 * holds the reason; the status is every rank's. */
static int exchange(comm_t *c, spans_t *src, spans_t *dst, char *err, size_t errlen) {
  int P = comm_size(c), me = comm_rank(c), rc = STRATA_OK;
  lists_t ls = {0}, ld = {0};
  float **s_at = NULL, **d_at = NULL, **sbuf = NULL, **rbuf = NULL;
  int64_t *scount = NULL, *rcount = NULL;
  comm_request_t **req = NULL;
  const int64_t *mine_s = NULL, *mine_d = NULL; /* this rank's lists among all */
  size_t nreq = 0;
  err[0] = 0;
  if (src->n) qsort(src->r, src->n, sizeof *src->r, by_pos); /* (a new rank sends nothing: no list at all) */
  if (dst->n) qsort(dst->r, dst->n, sizeof *dst->r, by_pos);
  if ((rc = gather_lists(c, src->r, src->n, &ls, err, errlen)) ||
      (rc = gather_lists(c, dst->r, dst->n, &ld, err, errlen)))
    goto agree;
  s_at = malloc((src->n + 1) * sizeof *s_at), d_at = malloc((dst->n + 1) * sizeof *d_at);
  sbuf = calloc((size_t)P, sizeof *sbuf), rbuf = calloc((size_t)P, sizeof *rbuf);
  scount = calloc((size_t)P, sizeof *scount), rcount = calloc((size_t)P, sizeof *rcount);
  if (!s_at || !d_at || !sbuf || !rbuf || !scount || !rcount) {
    rc = STRATA_ENOMEM, snprintf(err, errlen, "out of memory for the exchange's tables");
    goto agree;
  }
  for (size_t k = 0; k < src->n; k++) s_at[k] = src->r[k].at;
  for (size_t k = 0; k < dst->n; k++) d_at[k] = dst->r[k].at;
  /* What goes to and comes from each rank; every element this rank needs
   * must come from exactly one sender. */
  mine_s = ls.all + ls.displ[me], mine_d = ld.all + ld.displ[me];
  int64_t want = 0, got = 0, out = 0, in = 0;
  for (size_t k = 0; k < dst->n; k++) want += dst->r[k].n;
  for (int r = 0; r < P; r++) {
    scount[r] = overlaps(mine_s, src->n, ld.all + ld.displ[r], ld.cnt[r], NULL);
    rcount[r] = overlaps(ls.all + ls.displ[r], ls.cnt[r], mine_d, dst->n, NULL);
    got += rcount[r];
    if (r != me) out += scount[r], in += rcount[r];
  }
  int ov = senders_overlap(&ls, P);
  if (ov < 0) rc = STRATA_ENOMEM, snprintf(err, errlen, "out of memory for the exchange's check");
  else if (ov || got != want || src->bad || dst->bad)
    rc = STRATA_EINVAL, snprintf(err, errlen, "the senders' parts %s: %lld of the %lld elements this rank needs "
                                 "(an internal error)", ov ? "overlap" : "do not cover the state",
                                 (long long)got, (long long)want);
  for (int r = 0; r < P && !rc; r++) {
    if (r != me && scount[r] && !(sbuf[r] = malloc((size_t)scount[r] * sizeof(float)))) rc = STRATA_ENOMEM;
    if (r != me && rcount[r] && !(rbuf[r] = malloc((size_t)rcount[r] * sizeof(float)))) rc = STRATA_ENOMEM;
  }
  if (rc == STRATA_ENOMEM && !err[0])
    snprintf(err, errlen, "out of memory for %lld + %lld floats of messages", (long long)out, (long long)in);
  size_t most = 0;
  for (int r = 0; r < P; r++)
    most += (size_t)((scount[r] + PIECE_FLOATS - 1) / PIECE_FLOATS + (rcount[r] + PIECE_FLOATS - 1) / PIECE_FLOATS);
  if (!rc && !(req = calloc(most + 1, sizeof *req))) rc = STRATA_ENOMEM, snprintf(err, errlen, "out of memory");
agree:; /* nothing has been sent yet: every rank learns of any failure and leaves */
  int32_t bad = rc != STRATA_OK, any = 0;
  int crc = comm_allreduce(c, &any, &bad, 1, COMM_I32, COMM_MAX);
  if (crc) {
    rc = crc, snprintf(err, errlen, "%s", comm_last_error(c));
    goto done;
  }
  if (any) {
    if (!rc) rc = STRATA_EINVAL, snprintf(err, errlen, "another rank could not prepare the exchange");
    goto done;
  }
  for (int r = 0; r < P && !rc; r++) /* receives first, then the packed sends */
    for (int64_t k = 0; k < rcount[r] && r != me && !rc; k += PIECE_FLOATS) {
      int64_t n = rcount[r] - k < PIECE_FLOATS ? rcount[r] - k : PIECE_FLOATS;
      rc = comm_irecv(c, rbuf[r] + k, (size_t)n, COMM_F32, r, (int)(k / PIECE_FLOATS), &req[nreq++]);
    }
  for (int r = 0; r < P && !rc; r++) {
    if (r == me || !scount[r]) continue;
    copy_t cp = {.a_at = s_at, .b_at = NULL, .stream = sbuf[r]};
    overlaps(mine_s, src->n, ld.all + ld.displ[r], ld.cnt[r], &cp);
    for (int64_t k = 0; k < scount[r] && !rc; k += PIECE_FLOATS) {
      int64_t n = scount[r] - k < PIECE_FLOATS ? scount[r] - k : PIECE_FLOATS;
      rc = comm_isend(c, sbuf[r] + k, (size_t)n, COMM_F32, r, (int)(k / PIECE_FLOATS), &req[nreq++]);
    }
  }
  if (!rc) { /* this rank's own elements, while the messages travel */
    copy_t cp = {.a_at = s_at, .b_at = d_at};
    overlaps(mine_s, src->n, mine_d, dst->n, &cp);
  }
  for (size_t k = 0; k < nreq; k++) {
    int w = comm_wait(&req[k]);
    if (!rc) rc = w;
  }
  if (rc) {
    snprintf(err, errlen, "moving the state: %s", comm_last_error(c));
    goto done;
  }
  for (int r = 0; r < P; r++) {
    if (r == me || !rcount[r]) continue;
    copy_t cp = {.a_at = NULL, .b_at = d_at, .stream = rbuf[r]};
    overlaps(ls.all + ls.displ[r], ls.cnt[r], mine_d, dst->n, &cp);
  }
done:
  for (int r = 0; r < P && sbuf; r++) free(sbuf[r]), free(rbuf[r]);
  free(sbuf), free(rbuf), free(scount), free(rcount), free(s_at), free(d_at), free(req);
  lists_free(&ls), lists_free(&ld);
  return rc;
}

/* ------------------------------------------------------------ layouts */

/* Why the state of e cannot be moved in memory (NULL: it can): the parts
 * must stay where they are while they travel. */
static const char *immovable(const par_engine_t *e) {
  if (e->nvme) return "the optimizer state on NVMe (layout.offload_optimizer = nvme)";
  if (e->chunks) return "the chunk policy (offload.policy = chunks)";
  if (e->device != TENSOR_CPU) return "a state in device memory (this build moves host memory only)";
  return NULL;
}

int par_engine_get_state(par_engine_t *e, const char *array, float *out) {
  if (!e || !array || !out) return STRATA_EINVAL;
  char what = !strcmp(array, "params") ? 'p' : !strcmp(array, "m") ? 'm' : !strcmp(array, "v") ? 'v' : 0;
  int has = what == 'p' || (what == 'm' && (e->state_arrays & 1)) || (what == 'v' && (e->state_arrays & 2));
  if (!has)
    return engine_fail(e, 1, STRATA_EINVAL, "state array '%s': this engine's are \"params\"%s%s", array,
                       (e->state_arrays & 1) ? ", \"m\"" : "", (e->state_arrays & 2) ? ", \"v\"" : "");
  const char *why = immovable(e);
  if (why) return engine_fail(e, 1, STRATA_EUNSUPPORTED, "par_engine_get_state: not with %s", why);
  spans_t src, dst;
  char err[512];
  int rc = spans_init(&src, e, what), rd = spans_init(&dst, e, what);
  if (rc || rd) {
    spans_free(&src), spans_free(&dst);
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory");
  }
  rc = engine_each_part(e, 1, collect, &src);
  for (int i = 0; i < par_gpt_num_views(e->model) && !rc; i++) { /* every rank: the whole of every view */
    int64_t n = (i + 1 < par_gpt_num_views(e->model) ? dst.offset[i + 1] : dst.P) - dst.offset[i];
    if (spans_add(&dst, (int64_t)array_index(what) * dst.P + dst.offset[i], n, out + dst.offset[i]))
      rc = engine_fail(e, 0, STRATA_ENOMEM, "out of memory");
  }
  rc = engine_agree(e, rc);
  if (!rc && (rc = exchange(ctl_comm(e), &src, &dst, err, sizeof err))) engine_fail(e, 1, rc, "%s", err);
  spans_free(&src), spans_free(&dst);
  return rc;
}

/* ------------------------------------------------------------ migrate */

/* What par_engine_save writes besides the arrays, from the old engine. */
typedef struct {
  int64_t step, position, optim_step, scaler;
  double loss0, scale, good, skipped;
  char model[256], optim[16], optim_desc[512], data[256];
} meta_t;

static int say(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int say(char *err, size_t errlen, int rc, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* The new engine (on every rank of grown) from the old one's metadata and
 * parts: the rest of par_engine_migrate, with the communicator c over grown. */
static int migrate(par_engine_t *old, comm_t *c, int root, par_engine_t *e, par_data_t *data, long *step,
                   char *err, size_t errlen) {
  meta_t mt;
  int rc;
  memset(&mt, 0, sizeof mt);
  if (old) {
    mt.step = *step, mt.position = (int64_t)par_data_position(data), mt.optim_step = optim_get_step(old->opt);
    mt.loss0 = old->loss0;
    if (old->scaler) {
      mt.scaler = 1, mt.scale = optim_scaler_scale(old->scaler), mt.good = optim_scaler_good_steps(old->scaler);
      mt.skipped = (double)optim_scaler_skipped(old->scaler);
    }
    snprintf(mt.model, sizeof mt.model, "%s", old->model_desc);
    snprintf(mt.optim, sizeof mt.optim, "%s", old->optim_name);
    snprintf(mt.optim_desc, sizeof mt.optim_desc, "%s", old->optim_desc);
    par_data_describe(data, mt.data, sizeof mt.data);
  }
  if ((rc = comm_broadcast(c, &mt, sizeof mt, COMM_U8, root)))
    return say(err, errlen, rc, "the old run's step and descriptions: %s", comm_last_error(c));
  mt.model[sizeof mt.model - 1] = mt.optim[sizeof mt.optim - 1] = 0;
  mt.optim_desc[sizeof mt.optim_desc - 1] = mt.data[sizeof mt.data - 1] = 0;
  if (strcmp(mt.model, e->model_desc))
    return say(err, errlen, STRATA_ESHAPE, "the old run's model (%s) is not this one (%s)", mt.model, e->model_desc);
  if (strcmp(mt.optim, e->optim_name))
    return say(err, errlen, STRATA_EINVAL, "the old run's optimizer %s is not this one's %s", mt.optim,
               e->optim_name);
  spans_t src, dst;
  int rs = spans_init(&src, e, 0), rd = spans_init(&dst, e, 0);
  if (!rs && !rd && old && (rs = engine_each_part(old, 1, collect, &src))) say(err, errlen, rs, "%s", old->err);
  if (!rs && !rd && (rd = engine_each_part(e, 0, collect, &dst))) say(err, errlen, rd, "%s", e->err);
  if ((rs || rd) && !err[0]) say(err, errlen, STRATA_ENOMEM, "out of memory");
  /* (exchange agrees on any failure so far before it sends anything) */
  rc = rs ? rs : rd;
  if (rc) {
    src.bad = 1; /* still takes part, so that the others learn of it */
    src.n = dst.n = 0;
  }
  char xerr[512];
  int xr = exchange(c, &src, &dst, xerr, sizeof xerr);
  if (!rc && xr) rc = say(err, errlen, xr, "%s", xerr);
  spans_free(&src), spans_free(&dst);
  if (rc) return rc;
  if (e->scaler && mt.scaler && optim_scaler_restore(e->scaler, (float)mt.scale, (int)mt.good, (long)mt.skipped))
    return say(err, errlen, STRATA_EINVAL, "the old run's loss scale %g (%g good steps) is outside this run's range",
               mt.scale, mt.good);
  if ((rc = state_sync_lowp(e))) return say(err, errlen, rc, "%s", e->err);
  par_data_set_position(data, (uint64_t)mt.position);
  optim_set_step(e->opt, (long)mt.optim_step);
  e->loss0 = mt.loss0;
  snprintf(e->ckpt_optim, sizeof e->ckpt_optim, "%s", mt.optim_desc);
  snprintf(e->ckpt_data, sizeof e->ckpt_data, "%s", mt.data);
  *step = (long)mt.step;
  return STRATA_OK;
}

int par_engine_migrate(par_engine_t *old, MPI_Comm grown, const par_gpt_config_t *model, const par_layout_t *layout,
                       const par_optim_config_t *optim, const par_engine_options_t *opts, par_data_t *data,
                       long *step, par_engine_t **out, char *err, size_t errlen) {
  comm_t *c = NULL;
  par_engine_t *e = NULL;
  char msg[1536] = "";
  int rc;
  if (err && errlen) err[0] = 0;
  if (out) *out = NULL;
  if (!out || grown == MPI_COMM_NULL || !model || !layout || !optim || !data || !step)
    return say(err, errlen, STRATA_EINVAL, "par_engine_migrate: NULL argument");
  par_engine_options_t o = PAR_ENGINE_OPTIONS_DEFAULTS;
  if (opts) o = *opts;
  o.comm = grown;
  comm_config_t cc = COMM_CONFIG_DEFAULTS;
  cc.timeout_s = o.collective_timeout_s;
  if ((rc = comm_from_mpi(&c, grown, &cc)))
    return say(err, errlen, rc, "par_engine_migrate: cannot attach libcomm to the grown communicator (%s)",
               strata_status_string(rc));
  comm_set_name(c, "migrate");
  int P = comm_size(c), me = comm_rank(c);
  /* The lowest rank with an old engine tells the others its metadata; one
   * whose state cannot move stops every rank, before anything is made. */
  const char *why = old ? immovable(old) : NULL;
  int32_t in[2] = {old ? me : P, why ? me : P}, who[2];
  if ((rc = comm_allreduce(c, who, in, 2, COMM_I32, COMM_MIN))) {
    say(err, errlen, rc, "par_engine_migrate: %s", comm_last_error(c));
    goto done;
  }
  if (who[0] == P) {
    rc = say(err, errlen, STRATA_EINVAL, "par_engine_migrate: no rank of the grown communicator has an engine to move");
    goto done;
  }
  if (who[1] < P) {
    rc = say(err, errlen, STRATA_EUNSUPPORTED, "par_engine_migrate: the old engine (rank %d) cannot move its state "
             "in memory with %s; save and load a checkpoint instead", who[1],
             why ? why : "its optimizer offload or device");
    goto done;
  }
  rc = par_engine_create(&e, model, layout, optim, &o, msg, sizeof msg);
  if (!rc && (why = immovable(e))) /* (every rank alike: the same configuration) */
    rc = STRATA_EUNSUPPORTED, snprintf(msg, sizeof msg, "the new engine cannot receive a state in memory with %s; "
                                       "save and load a checkpoint instead", why);
  int32_t bad = rc != STRATA_OK ? me : P, first = P;
  int crc = comm_allreduce(c, &first, &bad, 1, COMM_I32, COMM_MIN);
  if (!rc && crc) rc = crc, snprintf(msg, sizeof msg, "%s", comm_last_error(c));
  else if (!rc && first < P)
    rc = STRATA_EINVAL, snprintf(msg, sizeof msg, "rank %d could not create its engine", first);
  if (rc) {
    say(err, errlen, rc, "par_engine_migrate: %s", msg);
    goto done;
  }
  rc = migrate(old, c, who[0], e, data, step, msg, sizeof msg);
  /* every rank leaves with the outcome of all */
  bad = rc != STRATA_OK ? me : P, first = P;
  crc = comm_allreduce(c, &first, &bad, 1, COMM_I32, COMM_MIN);
  if (!rc && crc) rc = crc, snprintf(msg, sizeof msg, "%s", comm_last_error(c));
  else if (!rc && first < P) rc = STRATA_EINVAL, snprintf(msg, sizeof msg, "rank %d failed to migrate", first);
  if (rc) say(err, errlen, rc, "par_engine_migrate: %s", msg);
done:
  if (rc) {
    par_engine_destroy(e);
    e = NULL;
  }
  comm_destroy(c);
  *out = e;
  return rc;
}
