/* The training state of one data-parallel rank under ZeRO stage 0-3
 * (Rajbhandari et al., arXiv 1910.02054, sec. 5): where the parameters,
 * gradients and optimizer state live, and the communication that keeps
 * them right, driven by the model's hooks (par_gpt_set_hook).
 *
 * Layout. The model's regions (embeddings, each block, the final
 * layernorm) are flattened one after another into "full" buffers, each
 * region padded to dp * shard elements (shard a multiple of ENGINE_ALIGN),
 * rank r owning [r * shard, (r + 1) * shard) of every region: one flat
 * buffer per kind, partitioned into contiguous, aligned shards; a parameter
 * may straddle a shard boundary. This rank's shards of all regions, one
 * after another, form its "shard" buffers.
 *
 *   stage  parameters    gradients          optimizer state   per step
 *   0      full          full               full              allreduce in buckets
 *   1      full          full               shard             reduce-scatter, all-gather
 *   2      full          shard (+ a bucket  shard             reduce-scatter per region,
 *                        per region while                     all-gather
 *                        it is reduced)
 *   3      shard (+ the  shard (+ buckets)  shard             all-gather each region before
 *          regions in                                         its forward and its backward,
 *          use)                                               reduce-scatter
 *
 * Communication goes through libcomm's non-blocking collectives, posted
 * from the hooks as soon as the model has finished a region's gradients
 * (stage 0: a bucket of regions of at least bucket_mb), and driven by
 * comm_test at every later hook, so that it overlaps the rest of the
 * backward. ZeRO-3 gathers the next region while the current one computes.
 * The tied embedding (used at both ends of each pass) stays gathered
 * through a pass, so each pass gathers every parameter once: ZeRO's 3 Psi
 * per step.
 *
 * Mixed precision (bf16 or fp16; Micikevicius et al., arXiv 1710.03740):
 * the parameters, gradients and pass buffers above hold 16-bit values, so
 * that they take 2 + 2 bytes per parameter and every collective moves 16-bit
 * elements; the optimizer keeps fp32 masters beside m and v (ZeRO's
 * K = 12 for Adam) and writes the 16-bit copy as it updates. The model
 * computes in fp32: at a region's NEED its 16-bit parameters are widened
 * into an fp32 working copy (ZeRO-3: the gathered region, released at
 * once), its fp32 gradients are rounded into the 16-bit storage at GRADS
 * (added in fp32 to the earlier microbatches' and rounded once), and both
 * copies go at DONE. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* A zeroed buffer of n elements of dt on the model's device, counted by its accountant. */
static int alloc(par_engine_t *e, tensor_t *t, tensor_dtype_t dt, size_t n, const char *what) {
  int64_t len = (int64_t)(n ? n : 1);
  int rc = tensor_alloc(e->tc, t, dt, e->device, 1, &len);
  if (!rc) rc = tensor_zero(e->tc, t);
  if (rc) return engine_fail(e, 0, rc, "%s (%zu elements): %s", what, n, tensor_last_error(e->tc));
  return STRATA_OK;
}

static void release(par_engine_t *e, tensor_t *t) {
  if (t->data) tensor_free(e->tc, t);
  memset(t, 0, sizeof *t);
}

static float *F(const tensor_t *t) { return t->data; }

/* Element i of t, whatever its dtype. */
static void *at(const tensor_t *t, size_t i) {
  return t->data ? (char *)t->data + i * tensor_dtype_size(t->dtype) : NULL;
}

static int tensor_fail(par_engine_t *e, int rc) { return engine_fail(e, 0, rc, "%s", tensor_last_error(e->tc)); }

/* The buffers a pass takes and gives back (ZeRO-2's gradient buckets,
 * ZeRO-3's gathered regions, the fp32 working copies of mixed precision),
 * counted apart from the model states. */
int state_take(par_engine_t *e, tensor_t *t, tensor_dtype_t dt, size_t n, const char *what) {
  int rc = alloc(e, t, dt, n, what);
  if (rc) return rc;
  e->buf_bytes += tensor_nbytes(t);
  if (e->buf_bytes > e->buf_peak) e->buf_peak = e->buf_bytes;
  return STRATA_OK;
}

void state_give_back(par_engine_t *e, tensor_t *t) {
  if (t->data) e->buf_bytes -= tensor_nbytes(t);
  release(e, t);
}

/* dst[doff, doff + n) = src[soff, soff + n), converting between fp32 and
 * 16-bit as their dtypes say (round to nearest even). */
int state_convert(par_engine_t *e, const tensor_t *dst, size_t doff, const tensor_t *src, size_t soff,
                   size_t n) {
  if (!n) return STRATA_OK;
  tensor_t d = tensor_view1(at(dst, doff), dst->dtype, e->device, (int64_t)n);
  tensor_t s = tensor_view1(at(src, soff), src->dtype, e->device, (int64_t)n);
  int rc = d.dtype == s.dtype ? tensor_copy(e->tc, &d, &s) : tensor_cast(e->tc, &d, &s);
  return rc ? tensor_fail(e, rc) : STRATA_OK;
}

/* dst[doff, doff + n) += src[soff, soff + n): added in fp32 (16-bit values
 * widened into taken buffers) and rounded to dst's dtype once. */
int state_accumulate(par_engine_t *e, const tensor_t *dst, size_t doff, const tensor_t *src,
                      size_t soff, size_t n) {
  tensor_t a = {0}, b = {0};
  int rc = STRATA_OK;
  if (!n) return STRATA_OK;
  tensor_t d = tensor_view1(at(dst, doff), dst->dtype, e->device, (int64_t)n);
  tensor_t s = tensor_view1(at(src, soff), src->dtype, e->device, (int64_t)n);
  tensor_t *x = &d, *y = &s;
  if (d.dtype != TENSOR_F32) {
    if ((rc = state_take(e, &a, TENSOR_F32, n, "fp32 accumulator")) || (rc = state_convert(e, &a, 0, &d, 0, n))) goto done;
    x = &a;
  }
  if (s.dtype != TENSOR_F32) {
    if ((rc = state_take(e, &b, TENSOR_F32, n, "fp32 accumulator")) || (rc = state_convert(e, &b, 0, &s, 0, n))) goto done;
    y = &b;
  }
  if ((rc = tensor_add_forward(e->tc, x, x, y))) {
    rc = tensor_fail(e, rc);
    goto done;
  }
  if (x != &d) rc = state_convert(e, &d, 0, x, 0, n);
done:
  state_give_back(e, &a), state_give_back(e, &b);
  return rc;
}

static int comm_fail(par_engine_t *e, int rc) { return engine_fail(e, 0, rc, "%s", comm_last_error(e->comm)); }

/* ------------------------------------------------------------ progress */

/* What follows a region's finished reduction: ZeRO 1 moves the reduced
 * part (MPI's in-place reduce-scatter leaves it at the region's start) to
 * this rank's place; ZeRO 2-3 add an accumulated microbatch into the shard
 * gradients and release the region's gradient bucket. */
static int host_grads_out(par_engine_t *e, int r);

static int reduced(par_engine_t *e, region_t *g, int r) {
  int rc;
  if (e->zero == 1 && e->rank > 0 &&
      (rc = state_convert(e, &e->full_g, g->foff + (size_t)e->rank * g->shard, &e->full_g, g->foff, g->shard)))
    return rc;
  if (e->zero >= 2) {
    if (g->reduce_into_scratch) { /* the scratch is the bucket's head */
      if ((rc = state_accumulate(e, &e->shard_g, g->soff, &g->grads, 0, g->shard))) return rc;
      g->reduce_into_scratch = 0;
    }
    /* ZeRO-Offload on a device: the step's shard of this region is final:
     * its copy to the host overlaps the rest of backward */
    if (e->host_opt && g->final && (rc = host_grads_out(e, r))) return rc;
    g->final = 0;
    state_give_back(e, &g->grads);
    if (!e->mixed) /* the model's gradients pointed into the bucket */
      par_gpt_bind(e->model, r, e->zero == 3 ? F(&g->gathered) : F(&e->full_p) + g->foff, NULL);
  }
  return STRATA_OK;
}

/* Drives every collective in flight (MPI progresses non-blocking
 * collectives only inside its calls) and finishes the completed ones. */
static void observe_done(par_engine_t *e) {
  if (e->t_first_post > 0 && e->t_first_done == 0) e->t_first_done = engine_now();
}

static int progress(par_engine_t *e) {
  int rc, done;
  if (e->chunks) return chunks_progress(e, 0);
  for (int b = 0; b < e->nbuckets; b++)
    if (e->bucket_req[b]) {
      if ((rc = comm_test(&e->bucket_req[b], &done)) != STRATA_OK) return comm_fail(e, rc);
      if (done && b == 0) observe_done(e);
    }
  for (int r = 0; r < e->nregions; r++) {
    region_t *g = &e->regions[r];
    if (g->gather && (rc = comm_test(&g->gather, &done)) != STRATA_OK) return comm_fail(e, rc);
    if (g->reduce) {
      if ((rc = comm_test(&g->reduce, &done)) != STRATA_OK) return comm_fail(e, rc);
      if (done && r == e->nregions - 1) observe_done(e);
      if (done && (rc = reduced(e, g, r)) != STRATA_OK) return rc;
    }
  }
  return STRATA_OK;
}

/* ------------------------------------------------------------ ZeRO-3 gathers */

static int post_gather(par_engine_t *e, int r) {
  region_t *g = &e->regions[r];
  if (r < 0 || g->gathered.data || g->gather) return STRATA_OK;
  int rc = state_take(e, &g->gathered, e->wdt, (size_t)e->size * g->shard, "ZeRO-3 gathered parameters");
  if (rc) return rc;
  if ((rc = comm_iallgather(e->comm, g->gathered.data, at(&e->shard_p, g->soff), g->shard, e->cdt, &g->gather)))
    return comm_fail(e, rc);
  return STRATA_OK;
}

/* The region used after r in this pass (its gather is started early). */
static int next_region(const par_engine_t *e, int r, int backward) {
  int L = e->nregions - 2;
  if (!backward) return r <= L ? r + 1 : -1;
  if (r == L + 1) return 0;
  if (r == 0) return L;
  return r >= 2 ? r - 1 : -1;
}

/* ------------------------------------------------------------ the hook */

static int post_reduction(par_engine_t *e, int r);

static int on_need(par_engine_t *e, int r, int backward) {
  region_t *g = &e->regions[r];
  int rc;
  if (e->zero == 3) {
    if ((rc = post_gather(e, r)) || (rc = post_gather(e, next_region(e, r, backward)))) return rc;
    if (g->gather && (rc = comm_wait(&g->gather)) != STRATA_OK) return comm_fail(e, rc);
  }
  /* the stored parameters, in the compute precision of the layout */
  const tensor_t *src = e->zero == 3 ? &g->gathered : &e->full_p;
  size_t soff = e->zero == 3 ? 0 : g->foff;
  float *params = at(src, soff), *grads = NULL;
  if (e->mixed) { /* an fp32 working copy; ZeRO-3's gathered region goes at once */
    if (!g->wp.data && ((rc = state_take(e, &g->wp, TENSOR_F32, g->n, "fp32 working parameters")) ||
                        (rc = state_convert(e, &g->wp, 0, src, soff, g->n))))
      return rc;
    if (e->zero == 3) state_give_back(e, &g->gathered);
    params = F(&g->wp);
  }
  if (backward && e->zero >= 2) {
    if (g->reduce) { /* the previous microbatch's reduction still reads the bucket */
      if ((rc = comm_wait(&g->reduce)) != STRATA_OK) return comm_fail(e, rc);
      if ((rc = reduced(e, g, r))) return rc;
    }
    /* The pass's gradient buckets stay few: besides this region's (and the
     * embeddings', which the tied head keeps all pass), only the one that
     * backward finished last may still be reducing; an older one is waited
     * for here, after a region's compute has overlapped it. */
    for (int q = r + 1, seen = 0; q < e->nregions; q++) {
      region_t *o = &e->regions[q];
      if (!o->reduce || q == 0 || seen++ == 0) continue;
      if ((rc = comm_wait(&o->reduce)) != STRATA_OK) return comm_fail(e, rc);
      if (q == e->nregions - 1) observe_done(e);
      if ((rc = reduced(e, o, q))) return rc;
    }
  }
  if (e->mixed) {
    if (backward && !g->wg.data && (rc = state_take(e, &g->wg, TENSOR_F32, g->n, "fp32 working gradients")))
      return rc;
    grads = backward ? F(&g->wg) : NULL;
  } else if (e->zero <= 1) {
    grads = F(&e->full_g) + g->foff;
  } else if (backward) {
    if (!g->grads.data && (rc = state_take(e, &g->grads, e->wdt, (size_t)e->size * g->shard, "gradient bucket")))
      return rc;
    grads = F(&g->grads);
  }
  return par_gpt_bind(e->model, r, params, grads);
}

static int on_done(par_engine_t *e, int r) {
  region_t *g = &e->regions[r];
  if (e->mixed) { /* the working copies leave until the next NEED */
    state_give_back(e, &g->wp), state_give_back(e, &g->wg);
    return par_gpt_bind(e->model, r, NULL, NULL);
  }
  if (e->zero == 3 && !g->gather) { /* the parameters leave until the next NEED */
    state_give_back(e, &g->gathered);
    par_gpt_bind(e->model, r, NULL, F(&g->grads));
  }
  return STRATA_OK;
}

int state_event(par_engine_t *e, par_gpt_event_t ev, int r, int backward) {
  e->events++;
  int rc = progress(e);
  /* backward went on to this event with its first reduction in flight */
  if (backward && e->t_first_post > 0 && e->t_first_done == 0 && e->t_inflight == 0) e->t_inflight = engine_now();
  if (!rc && e->chunks) {
    if (ev == PAR_GPT_NEED) rc = chunks_need(e, r, backward);
    else if (ev == PAR_GPT_DONE) rc = chunks_done(e, r, backward);
    else rc = chunks_grads(e, r);
  } else if (!rc) {
    if (ev == PAR_GPT_NEED) rc = on_need(e, r, backward);
    else if (ev == PAR_GPT_DONE) rc = on_done(e, r);
    else rc = post_reduction(e, r);
  }
  if (rc && !e->hook_rc) e->hook_rc = rc;
  return rc;
}

static int hook(void *ctx, par_gpt_event_t ev, int r, int backward) { return state_event(ctx, ev, r, backward); }

int state_region_held(par_engine_t *e, int r) {
  int L = e->nregions - 2;
  for (int c = 0; c < e->interleave; c++) {
    int first, count, embeds, loss;
    par_gpt_stage_chunk(e->model, c, &first, &count, &embeds, &loss);
    if ((r == 0 && (embeds || loss)) || (r == L + 1 && loss) || (r > first && r <= first + count)) return 1;
  }
  return 0;
}

int state_view_is_copy(const par_engine_t *e, int i) {
  return e->pp > 1 && e->stage != 0 && i < e->regions[0].first_view + e->regions[0].nviews && e->regions[0].n > 0;
}

/* The events of par_gpt_stage_backward over blocks [l0, l1) (gpt_layers.c, run_backward). */
int state_replay_backward(par_engine_t *e, int from, int l0, int l1) {
  int L = e->nregions - 2, k = 0, rc = STRATA_OK, embed = l0 == 0, head = l1 == L;
#define EV(ev, r)                                                                                  \
  do {                                                                                             \
    if (k++ >= from && !rc) rc = state_event(e, ev, r, 1);                                         \
  } while (0)
  if (head) {
    EV(PAR_GPT_NEED, L + 1);
    EV(PAR_GPT_NEED, 0);
    EV(PAR_GPT_GRADS, L + 1);
    EV(PAR_GPT_DONE, L + 1);
    if (!embed) {
      EV(PAR_GPT_GRADS, 0);
      EV(PAR_GPT_DONE, 0);
    }
  }
  for (int l = l1; l > l0; l--) {
    EV(PAR_GPT_NEED, l);
    EV(PAR_GPT_GRADS, l);
    EV(PAR_GPT_DONE, l);
  }
  if (embed) {
    if (!head) EV(PAR_GPT_NEED, 0);
    EV(PAR_GPT_GRADS, 0);
    EV(PAR_GPT_DONE, 0);
  }
#undef EV
  return rc;
}

int state_replay(par_engine_t *e, int from, int with_backward) {
  int L = e->nregions - 2, k = 0, rc = STRATA_OK;
#define EV(ev, r, b)                                                                               \
  do {                                                                                             \
    if (k++ >= from && !rc) rc = state_event(e, ev, r, b);                                         \
  } while (0)
  EV(PAR_GPT_NEED, 0, 0);
  for (int l = 1; l <= L; l++) {
    EV(PAR_GPT_NEED, l, 0);
    EV(PAR_GPT_DONE, l, 0);
  }
  EV(PAR_GPT_NEED, L + 1, 0);
  EV(PAR_GPT_DONE, L + 1, 0);
  EV(PAR_GPT_DONE, 0, 0);
  if (with_backward) {
    EV(PAR_GPT_NEED, L + 1, 1);
    EV(PAR_GPT_NEED, 0, 1);
    EV(PAR_GPT_GRADS, L + 1, 1);
    EV(PAR_GPT_DONE, L + 1, 1);
    for (int l = L; l >= 1; l--) {
      EV(PAR_GPT_NEED, l, 1);
      EV(PAR_GPT_GRADS, l, 1);
      EV(PAR_GPT_DONE, l, 1);
    }
    EV(PAR_GPT_GRADS, 0, 1);
    EV(PAR_GPT_DONE, 0, 1);
  }
#undef EV
  return rc;
}

/* ------------------------------------------------------------ reductions */

static void delay(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  if (s > 0) nanosleep(&ts, NULL);
}

/* Mixed precision: the region's fp32 gradients into the 16-bit storage the
 * reductions read: ZeRO 0-1 the full gradients (a later microbatch added
 * in fp32), ZeRO 2-3 a fresh bucket. */
static int stage_grads(par_engine_t *e, region_t *g) {
  int rc;
  if (e->zero <= 1)
    return e->microbatch == 0 ? state_convert(e, &e->full_g, g->foff, &g->wg, 0, g->n)
                              : state_accumulate(e, &e->full_g, g->foff, &g->wg, 0, g->n);
  if (!g->grads.data && (rc = state_take(e, &g->grads, e->wdt, (size_t)e->size * g->shard, "gradient bucket")))
    return rc;
  return state_convert(e, &g->grads, 0, &g->wg, 0, g->n);
}

static int post_reduction(par_engine_t *e, int r) {
  region_t *g = &e->regions[r];
  int rc = STRATA_OK;
  if (r == 0 && e->reducing) e->t_backward_end = engine_now();
  if (e->mixed && (rc = stage_grads(e, g))) return rc;
  g->final = e->reducing;
  if (e->size == 1) { /* nothing to reduce; ZeRO 2-3 still move the bucket into the shard */
    if (e->zero >= 2) {
      g->reduce_into_scratch = e->microbatch > 0;
      if (!g->reduce_into_scratch && (rc = state_convert(e, &e->shard_g, g->soff, &g->grads, 0, g->shard))) return rc;
      return reduced(e, g, r);
    }
    return STRATA_OK;
  }
  if (e->zero <= 1 && !e->reducing) return STRATA_OK; /* accumulate locally, reduce once */
  delay(e->opts.delay_reductions_s);
  if (e->t_first_post == 0 && e->reducing) e->t_first_post = engine_now();
  if (e->zero == 0) {
    int b = g->bucket;
    if (r != e->bucket_lo[b]) return STRATA_OK; /* the bucket's lowest region completes it */
    region_t *lo = &e->regions[e->bucket_lo[b]], *hi = &e->regions[e->bucket_hi[b]];
    size_t count = hi->foff + (size_t)e->size * hi->shard - lo->foff;
    void *p = at(&e->full_g, lo->foff);
    rc = comm_iallreduce(e->comm, p, p, count, e->cdt, COMM_AVG, &e->bucket_req[b]);
  } else if (e->zero == 1) {
    void *p = at(&e->full_g, g->foff);
    rc = comm_ireduce_scatter(e->comm, p, p, g->shard, e->cdt, COMM_AVG, &g->reduce);
  } else {
    /* The first microbatch reduces straight into the shard gradients; a
     * later one into the bucket's own head (its part there is consumed by
     * MPI before the result lands), then added. */
    g->reduce_into_scratch = e->microbatch > 0;
    void *recv = g->reduce_into_scratch ? g->grads.data : at(&e->shard_g, g->soff);
    rc = comm_ireduce_scatter(e->comm, recv, g->grads.data, g->shard, e->cdt, COMM_AVG, &g->reduce);
  }
  return rc ? comm_fail(e, rc) : STRATA_OK;
}

int state_finish_reductions(par_engine_t *e) {
  int rc;
  if (e->chunks) return chunks_progress(e, 1);
  for (int b = 0; b < e->nbuckets; b++)
    if (e->bucket_req[b]) {
      if ((rc = comm_wait(&e->bucket_req[b])) != STRATA_OK) return comm_fail(e, rc);
      if (b == 0) observe_done(e);
    }
  for (int r = e->nregions - 1; r >= 0; r--) {
    region_t *g = &e->regions[r];
    if (g->reduce) {
      if ((rc = comm_wait(&g->reduce)) != STRATA_OK) return comm_fail(e, rc);
      if (r == e->nregions - 1) observe_done(e);
      if ((rc = reduced(e, g, r))) return rc;
    }
  }
  return STRATA_OK;
}

int state_gather_updates(par_engine_t *e) {
  int rc = STRATA_OK;
  if (e->size == 1 || e->zero == 0 || e->zero == 3) return STRATA_OK;
  for (int r = 0; r < e->nregions && !rc; r++) { /* in place: this rank's part is already there */
    region_t *g = &e->regions[r];
    rc = comm_iallgather(e->comm, at(&e->full_p, g->foff), at(&e->full_p, g->foff + (size_t)e->rank * g->shard),
                         g->shard, e->cdt, &g->gather);
  }
  for (int r = 0; r < e->nregions; r++) {
    int w = comm_wait(&e->regions[r].gather);
    if (!rc) rc = w;
  }
  return rc ? comm_fail(e, rc) : STRATA_OK;
}

void state_release_all(par_engine_t *e) {
  if (e->chunks) chunks_progress(e, 1);
  for (int b = 0; b < e->nbuckets; b++) comm_wait(&e->bucket_req[b]);
  for (int r = 0; r < e->nregions; r++) {
    region_t *g = &e->regions[r];
    comm_wait(&g->gather), comm_wait(&g->reduce);
    g->reduce_into_scratch = 0, g->final = 0;
    state_give_back(e, &g->grads), state_give_back(e, &g->gathered), state_give_back(e, &g->wp), state_give_back(e, &g->wg);
  }
  state_copies_wait(e);
  e->pushing = 0;
  state_drop_g32(e);
}

int state_zero_grads(par_engine_t *e) {
  if (e->chunks) return chunks_begin_step(e);
  if (e->host_opt) { /* (a failed step's copies may still read the gradients) */
    int w = state_copies_wait(e);
    if (w) return w;
    memset(e->d2h, 0, (size_t)e->nregions);
  }
  tensor_t *t = e->zero <= 1 ? &e->full_g : &e->shard_g;
  int rc = tensor_zero(e->tc, t);
  return rc ? engine_fail(e, 0, rc, "%s", tensor_last_error(e->tc)) : STRATA_OK;
}

float *state_full_params(par_engine_t *e) { return e->zero <= 2 ? F(&e->full_p) : NULL; }

/* ------------------------------------------------------------ pieces */

int state_pieces(par_engine_t *e) {
  int nv = par_gpt_num_views(e->model), n = 0;
  e->pieces = calloc((size_t)nv, sizeof *e->pieces);
  if (!e->pieces) return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for %d pieces", nv);
  int sharded = e->zero >= 1;
  for (int r = 0; r < e->nregions; r++) {
    region_t *g = &e->regions[r];
    size_t lo = sharded ? (size_t)e->rank * g->shard : 0, hi = sharded ? lo + g->shard : g->n;
    if (e->chunks) lo = 0, hi = chunks_owned(e, r) ? g->n : 0; /* whole regions, the rank's own */
    for (int i = g->first_view; i < g->first_view + g->nviews; i++) {
      const par_gpt_view_t *v = par_gpt_view(e->model, i);
      size_t va = v->offset - g->off, vb = va + v->numel; /* region-relative */
      size_t a = va > lo ? va : lo, b = vb < hi ? vb : hi;
      if (a >= b) continue;
      e->pieces[n++] = (piece_t){.view = i, .a = a - va, .n = b - a};
    }
  }
  e->npieces = n;
  return STRATA_OK;
}

static int region_of_view(const par_engine_t *e, int view) {
  for (int r = 0; r < e->nregions; r++)
    if (view < e->regions[r].first_view + e->regions[r].nviews) return r;
  return e->nregions - 1;
}

int state_piece_region(const par_engine_t *e, int i) { return region_of_view(e, e->pieces[i].view); }

int state_region_pieces(const par_engine_t *e, int i0, int *i1) {
  int r = state_piece_region(e, i0);
  for (*i1 = i0; *i1 < e->npieces && state_piece_region(e, *i1) == r;) ++*i1;
  return r;
}

void state_piece_ptrs(par_engine_t *e, int i, float **p, float **g, float **m, float **v, void **lowp) {
  const piece_t *pc = &e->pieces[i];
  const par_gpt_view_t *vw = par_gpt_view(e->model, pc->view);
  int r = region_of_view(e, pc->view);
  const region_t *rg = &e->regions[r];
  size_t rel = vw->offset - rg->off + pc->a;                 /* region-relative element */
  size_t full = rg->foff + rel;                              /* in the full buffers */
  size_t shard = rg->soff + rel - (size_t)e->rank * rg->shard; /* in the shard buffers */
  size_t st = e->zero == 0 ? full : shard;
  void *stored = e->zero <= 2 ? at(&e->full_p, full) : at(&e->shard_p, shard);
  if (e->host_opt) { /* the optimizer's arrays and gradients on the host; o: in the region's part */
    size_t o = st - (e->zero == 0 ? rg->foff : rg->soff);
    float **res = e->nvme ? e->res + OFF_ARRAYS * r : NULL;
    *p = res ? (res[OFF_MASTER] ? res[OFF_MASTER] + o : NULL) : F(&e->master) + st;
    *m = res ? (res[OFF_M] ? res[OFF_M] + o : NULL) : e->m.data ? F(&e->m) + st : NULL;
    *v = res ? (res[OFF_V] ? res[OFF_V] + o : NULL) : e->v.data ? F(&e->v) + st : NULL;
    if (e->mixed) *g = e->g32r_region == r ? F(&e->g32r) + o : NULL;
    else *g = e->g32_live ? (float *)at(&e->gstage, st) : NULL;
    if (lowp) *lowp = e->mixed ? at(&e->gstage, st) : NULL;
    return;
  }
  if (e->chunks) { /* (ZeRO-0, whole regions) the arrays while resident, else NULL */
    float **res = e->res + OFF_ARRAYS * r;
    void *lp = res[OFF_PARAMS] ? (char *)res[OFF_PARAMS] + rel * tensor_dtype_size(e->wdt) : NULL;
    *p = e->mixed ? (res[OFF_MASTER] ? res[OFF_MASTER] + rel : NULL) : lp;
    *g = e->mixed ? (e->g32_res ? e->g32_res + rel : NULL) : res[OFF_GRADS] ? res[OFF_GRADS] + rel : NULL;
    *m = res[OFF_M] ? res[OFF_M] + rel : NULL;
    *v = res[OFF_V] ? res[OFF_V] + rel : NULL;
    if (lowp) *lowp = e->mixed ? lp : NULL;
    return;
  }
  if (e->nvme) { /* the region's arrays while resident (NULL otherwise) */
    size_t lo = e->zero == 0 ? rel : rel - (size_t)e->rank * rg->shard;
    float **res = e->res + OFF_ARRAYS * r;
    *p = e->mixed ? (res[0] ? res[0] + lo : NULL) : stored;
    *g = e->mixed ? (e->g32.data ? F(&e->g32) + st : NULL) : e->zero <= 1 ? F(&e->full_g) + full : F(&e->shard_g) + shard;
    *m = res[1] ? res[1] + lo : NULL;
    *v = res[2] ? res[2] + lo : NULL;
    if (lowp) *lowp = e->mixed ? stored : NULL;
    return;
  }
  if (e->mixed) {
    *p = F(&e->master) + st;
    *g = e->g32.data ? F(&e->g32) + st : NULL;
  } else {
    *p = stored;
    *g = e->zero <= 1 ? F(&e->full_g) + full : F(&e->shard_g) + shard;
  }
  *m = e->m.data ? F(&e->m) + st : NULL;
  *v = e->v.data ? F(&e->v) + st : NULL;
  if (lowp) *lowp = e->mixed ? stored : NULL;
}

/* ------------------------------------------------------------ mixed precision */

static int push_params(par_engine_t *e, int r, int cast);

int state_sync_lowp(par_engine_t *e) {
  int rc = STRATA_OK;
  if (e->host_opt) { /* the masters on the host: to the device's parameters (fp32 runs too) */
    for (int r = 0; r < e->nregions && !rc; r++) {
      if (!e->regions[r].n || (rc = state_resident(e, r, 1))) continue;
      rc = push_params(e, r, 1);
      int rr = state_resident(e, r, 0);
      if (!rc) rc = rr;
    }
    int w = state_copies_wait(e);
    return rc ? rc : w ? w : state_gather_updates(e);
  }
  if (!e->mixed) return STRATA_OK;
  for (int r = 0; r < e->nregions && !rc; r++) {
    region_t *g = &e->regions[r];
    if ((e->nvme || e->chunks) && (!g->n || (e->chunks && !chunks_owned(e, r)))) continue;
    if ((rc = state_resident(e, r, 1))) break;
    int in_off = e->nvme || e->chunks; /* the masters: the region's tensor of liboffload */
    tensor_t mr = in_off ? tensor_view1(e->res[OFF_ARRAYS * r], TENSOR_F32, e->device, 1) : e->master;
    size_t mo = in_off ? 0 : e->zero == 0 ? g->foff : g->soff; /* the region's first master element */
    if (e->chunks) { /* both resident on the host (also when the model is on a device) */
      tensor_t lp = tensor_view1(e->res[OFF_ARRAYS * r + OFF_PARAMS], e->wdt, TENSOR_CPU, (int64_t)g->n);
      tensor_t ms = tensor_view1(e->res[OFF_ARRAYS * r], TENSOR_F32, TENSOR_CPU, (int64_t)g->n);
      if ((rc = tensor_cast(e->tc, &lp, &ms))) tensor_fail(e, rc);
    } else if (e->zero == 0) rc = state_convert(e, &e->full_p, g->foff, &mr, mo, (size_t)e->size * g->shard);
    else if (e->zero == 3) rc = state_convert(e, &e->shard_p, g->soff, &mr, mo, g->shard);
    else rc = state_convert(e, &e->full_p, g->foff + (size_t)e->rank * g->shard, &mr, mo, g->shard);
    int rr = state_resident(e, r, 0);
    if (!rc) rc = rr;
  }
  return rc ? rc : state_gather_updates(e);
}

int state_take_g32(par_engine_t *e) {
  int rc;
  if (e->host_opt) { /* the regions whose copies backward has not queued yet, then all of them here */
    for (int r = 0; r < e->nregions; r++)
      if ((rc = host_grads_out(e, r))) return rc;
    if ((rc = state_copies_wait(e))) return rc;
    e->g32_live = 1;
    return STRATA_OK;
  }
  if (!e->mixed || e->chunks) return STRATA_OK; /* (the chunk policy's: per region, chunks_resident) */
  size_t n32 = e->zero == 0 ? e->nfull : e->nshard;
  if (e->g32_id >= 0) { /* ZeRO-Offload: on the host, for the CPU optimizer */
    void *p;
    if ((rc = offload_access(e->off, e->g32_id, OFFLOAD_HOST, &p)))
      return engine_fail(e, 0, rc, "optimizer offload: fp32 gradients: %s", offload_error(e->off));
    e->g32 = tensor_view1(p, TENSOR_F32, e->device, (int64_t)n32);
  } else if ((rc = state_take(e, &e->g32, TENSOR_F32, n32, "fp32 gradients of the update"))) {
    return rc;
  }
  if (e->zero == 0) rc = state_convert(e, &e->g32, 0, &e->full_g, 0, e->nfull);
  else if (e->zero >= 2) rc = state_convert(e, &e->g32, 0, &e->shard_g, 0, e->nshard);
  else
    for (int r = 0; r < e->nregions && !rc; r++) {
      region_t *g = &e->regions[r];
      rc = state_convert(e, &e->g32, g->soff, &e->full_g, g->foff + (size_t)e->rank * g->shard, g->shard);
    }
  for (int i = 0; i < e->npieces; i++) {
    float *p, *gr, *m, *v;
    state_piece_ptrs(e, i, &p, &gr, &m, &v, NULL);
    e->tens[i].grad = gr;
  }
  return rc;
}

void state_drop_g32(par_engine_t *e) {
  if (e->host_opt) {
    e->g32_live = 0, e->g32r_region = -1;
    for (int i = 0; i < e->npieces && e->tens; i++) e->tens[i].grad = NULL;
    return;
  }
  if (!e->g32.data) return;
  if (e->g32_id >= 0) { /* its chunk goes back to the host tier's pool */
    offload_release(e->off, e->g32_id, OFFLOAD_FREE);
    memset(&e->g32, 0, sizeof e->g32);
  } else {
    state_give_back(e, &e->g32);
  }
  for (int i = 0; i < e->npieces && e->tens; i++) e->tens[i].grad = NULL;
}

/* ------------------------------------------------------------ create */

/* The fp32 values a rank initialises in region g: its elements [*a, *b)
 * (region-relative), stored from the returned pointer on: the whole region
 * where the rank holds it (stages 0-2 in fp32, stage 0's masters), else
 * its shard (by global index, so that every layout draws the same values). */
static float *init_range(par_engine_t *e, region_t *g, size_t *a, size_t *b) {
  int masters = e->mixed || e->host_opt, sharded = masters ? e->zero >= 1 : e->zero == 3;
  *a = sharded ? (size_t)e->rank * g->shard : 0;
  *b = sharded ? *a + g->shard : g->n;
  if (*b > g->n) *b = g->n;
  float **res = e->res ? e->res + OFF_ARRAYS * (int)(g - e->regions) : NULL;
  if (e->chunks) { /* the whole region, resident, on the rank that keeps it */
    *a = 0, *b = chunks_owned(e, (int)(g - e->regions)) ? g->n : 0;
    return e->mixed ? res[OFF_MASTER] : res[OFF_PARAMS];
  }
  if (e->nvme && masters) return res[OFF_MASTER]; /* the region's masters, resident */
  tensor_t *t = masters ? &e->master : e->zero == 3 ? &e->shard_p : &e->full_p;
  return sharded ? F(t) + g->soff : F(t) + g->foff;
}

/* The parameters of a model file (opts.init), through a model of the same
 * configuration with its own storage, copied into this rank's buffers. */
static int read_init(par_engine_t *e) {
  par_gpt_t *tmp = NULL;
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  o.threads = e->opts.threads;
  char err[1024];
  int rc = par_gpt_create_ex(&tmp, &e->mc, &o, 0);
  if (rc) return engine_fail(e, 1, rc, "model.init: %s", par_gpt_create_error());
  if ((rc = par_model_read(e->opts.init, tmp, err, sizeof err))) {
    par_gpt_destroy(tmp);
    return engine_fail(e, 1, rc, "model.init: %s", err);
  }
  const float *src = par_gpt_params(tmp, NULL);
  for (int r = 0; r < e->nregions && !rc; r++) {
    size_t a, b;
    if (!e->regions[r].n || (rc = state_resident(e, r, 1))) continue;
    float *dst = init_range(e, &e->regions[r], &a, &b);
    if (a < b) {
      tensor_t d = tensor_view1(dst, TENSOR_F32, e->opt_host ? TENSOR_CPU : e->device, (int64_t)(b - a));
      tensor_t s = tensor_view1((float *)src + e->regions[r].off + a, TENSOR_F32, TENSOR_CPU, (int64_t)(b - a));
      if ((rc = tensor_copy(e->tc, &d, &s))) tensor_fail(e, rc);
    }
    int rr = state_resident(e, r, 0);
    if (!rc) rc = rr;
  }
  par_gpt_destroy(tmp);
  return rc;
}

static int init_params(par_engine_t *e) {
  int rc = e->opts.init ? read_init(e) : STRATA_OK;
  for (int r = 0; r < e->nregions && !e->opts.init && !e->opts.no_init; r++) {
    size_t a, b;
    if (!e->regions[r].n) continue;
    if ((rc = state_resident(e, r, 1))) return rc;
    float *dst = init_range(e, &e->regions[r], &a, &b);
    if (a < b && e->opt_host) { /* the model draws on its device: through a device buffer to the host's arrays */
      tensor_t t = {0}, h = tensor_view1(dst, TENSOR_F32, TENSOR_CPU, (int64_t)(b - a));
      if ((rc = alloc(e, &t, TENSOR_F32, b - a, "initial values"))) return rc;
      if (par_gpt_init_values(e->model, e->opts.seed, e->regions[r].off + a, b - a, t.data))
        rc = engine_fail(e, 0, STRATA_EINVAL, "initialising: %s", par_gpt_last_error(e->model));
      else if ((rc = tensor_copy(e->tc, &h, &t)))
        tensor_fail(e, rc);
      release(e, &t);
      if (rc) return rc;
    } else if (a < b && par_gpt_init_values(e->model, e->opts.seed, e->regions[r].off + a, b - a, dst))
      return engine_fail(e, 0, STRATA_EINVAL, "initialising: %s", par_gpt_last_error(e->model));
    if ((rc = state_resident(e, r, 0))) return rc;
  }
  return rc ? rc : state_sync_lowp(e);
}

/* Stage 0: buckets of whole regions in the order backward finishes them
 * (the last region first), each at least bucket_bytes; a bucket is posted
 * when its lowest region is done, so it spans regions held one after
 * another in both the layout and that order (a pipeline stage's copy of the
 * tied embedding, done right after the head, is a bucket of its own). */
static int make_buckets(par_engine_t *e) {
  int n = e->nregions, L = n - 2;
  e->bucket_lo = calloc((size_t)n, sizeof(int));
  e->bucket_hi = calloc((size_t)n, sizeof(int));
  e->bucket_req = calloc((size_t)n, sizeof *e->bucket_req);
  int *order = calloc((size_t)n, sizeof(int));
  if (!e->bucket_lo || !e->bucket_hi || !e->bucket_req || !order) {
    free(order);
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory");
  }
  int k = 0, copy = e->regions[0].n > 0 && e->pp > 1 && e->stage != 0;
  if (e->regions[L + 1].n) order[k++] = L + 1;
  if (copy) order[k++] = 0;
  for (int r = L; r >= 1; r--)
    if (e->regions[r].n) order[k++] = r;
  if (e->regions[0].n && !copy) order[k++] = 0;
  int b = -1;
  size_t bytes = 0, cap = 0;
  for (int i = 0; i < k; i++) {
    int r = order[i];
    /* it continues the bucket when it is the held region right below the previous one */
    int below = i > 0 ? order[i - 1] - 1 : -1;
    while (below >= 0 && !e->regions[below].n) below--;
    int cont = b >= 0 && bytes < cap && below == r;
    if (!cont) {
      b++;
      e->bucket_hi[b] = r;
      bytes = 0;
      /* The first bucket (the last layers, whose gradients are ready first)
       * closes at 1 MiB already, as PyTorch DDP's: its reduction starts while
       * most of backward is still to run. */
      cap = b == 0 && e->bucket_bytes > (1u << 20) ? (1u << 20) : e->bucket_bytes;
    }
    e->regions[r].bucket = b;
    e->bucket_lo[b] = r;
    bytes += (size_t)e->size * e->regions[r].shard * sizeof(float);
  }
  free(order);
  e->nbuckets = b + 1;
  return STRATA_OK;
}

/* The optimizer arrays' bits in state_arrays order of the offload tables:
 * k = 0 the fp32 masters (bit 4), 1 m (bit 1), 2 v (bit 2). */
static const int opt_bits[3] = {4, 1, 2};

/* liboffload's manager for the optimizer state: chunks of `most` floats,
 * `host` of them on the host tier, `nvme` on the NVMe tier (0: none). */
static int open_offload(par_engine_t *e, size_t most, size_t host, size_t nvme) {
  offload_config_t oc = OFFLOAD_CONFIG_DEFAULTS;
  char err[600];
  if (e->device != TENSOR_CPU && !e->host_opt)
    return engine_fail(e, 1, STRATA_EUNSUPPORTED, "optimizer offload runs on the CPU path in this build");
  oc.cuda_device = e->host_opt ? e->device : -1; /* host chunks pinned: the copies to and from the device */
  oc.chunk_bytes = round_up((most ? most : 1) * sizeof(float), 4096);
  oc.budget[OFFLOAD_DEVICE] = 0, oc.budget[OFFLOAD_HOST] = host * oc.chunk_bytes;
  if (e->opts.host_bytes > 0) oc.budget[OFFLOAD_HOST] = (size_t)e->opts.host_bytes; /* the user's budget */
  oc.budget[OFFLOAD_NVME] = nvme * oc.chunk_bytes;
  oc.nvme_dir = e->opts.offload_dir ? e->opts.offload_dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  int rc = offload_create(&e->off, &oc, err, sizeof err);
  return rc ? engine_fail(e, 1, rc, "optimizer offload: %s", err) : STRATA_OK;
}

/* ZeRO-Offload's static policy: each optimizer array (the fp32 masters
 * under mixed precision, m, v) is one tensor of liboffload's host tier, in a
 * chunk of its own, made and pinned there now (zeroed) for the engine's
 * life; the tensors below view it. Under mixed precision the update's fp32
 * gradients are one more, on the host for each step only (the CPU
 * optimizer's; state_take_g32). */
static int offload_optimizer(par_engine_t *e, int arrays, size_t n) {
  int count = !!(arrays & 1) + !!(arrays & 2) + !!(arrays & 4);
  int g32 = e->mixed && !e->host_opt; /* (on a device the gradients wait in gstage) */
  int rc = open_offload(e, n, (size_t)count + (size_t)g32 + !count, 0);
  if (rc) return rc;
  tensor_t *ts[3] = {&e->master, &e->m, &e->v};
  for (int k = 0, t; k < 3; k++) {
    void *p = NULL;
    if (!(arrays & opt_bits[k])) continue;
    if ((rc = offload_tensor_add(e->off, n * sizeof(float), &t)) ||
        (rc = offload_access(e->off, t, OFFLOAD_HOST, &p)))
      return engine_fail(e, 0, rc, "optimizer offload: %s", offload_error(e->off));
    *ts[k] = tensor_view1(p, TENSOR_F32, e->host_opt ? TENSOR_CPU : e->device, (int64_t)n);
  }
  if (g32 && (rc = offload_tensor_add(e->off, n * sizeof(float), &e->g32_id)))
    return engine_fail(e, 0, rc, "optimizer offload: %s", offload_error(e->off));
  return STRATA_OK;
}

/* Region r's length in the optimizer's layout (0: another stage's). */
static size_t opt_len(const par_engine_t *e, const region_t *g) {
  return !g->n ? 0 : e->zero == 0 ? (size_t)e->size * g->shard : g->shard;
}

/* ZeRO-Infinity: each region's part of each optimizer array a tensor of
 * liboffload, whose NVMe tier holds them all and whose host tier room for
 * the arrays of one region at a time (chunks as large as the largest
 * region's part, one per array and one more). */
static int offload_nvme(par_engine_t *e, int arrays) {
  size_t most = 1;
  for (int r = 0; r < e->nregions; r++)
    if (opt_len(e, &e->regions[r]) > most) most = opt_len(e, &e->regions[r]);
  int count = !!(arrays & 1) + !!(arrays & 2) + !!(arrays & 4), rc;
  if ((rc = open_offload(e, most, (size_t)count + 1, 3 * (size_t)e->nregions + 4))) return rc;
  e->nvme = 1;
  if (!(e->off_ids = malloc(OFF_ARRAYS * (size_t)e->nregions * sizeof *e->off_ids)) ||
      !(e->res = calloc(OFF_ARRAYS * (size_t)e->nregions, sizeof *e->res)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for the offloaded optimizer's tables");
  for (int r = 0; r < e->nregions; r++)
    for (int k = 0; k < OFF_ARRAYS; k++) {
      size_t n = opt_len(e, &e->regions[r]);
      e->off_ids[OFF_ARRAYS * r + k] = -1;
      if (k >= 3 || !(arrays & opt_bits[k]) || !n) continue;
      if ((rc = offload_tensor_add(e->off, n * sizeof(float), &e->off_ids[OFF_ARRAYS * r + k])))
        return engine_fail(e, 0, rc, "optimizer offload to NVMe: %s", offload_error(e->off));
    }
  return STRATA_OK;
}

/* ------------------------------------------------------------ ZeRO-Offload on a device */

/* Region r's part of the optimizer's layout: its first element there and its length. */
static size_t opt_start(const par_engine_t *e, const region_t *g) { return e->zero == 0 ? g->foff : g->soff; }

/* Where region r's part of the optimizer's layout is on the device: its
 * parameters (grads 0) or its reduced gradients (grads 1). */
static void dev_place(par_engine_t *e, const region_t *g, int grads, tensor_t **t, size_t *off) {
  size_t mine = g->foff + (size_t)e->rank * g->shard;
  if (e->zero == 0) *t = grads ? &e->full_g : &e->full_p, *off = g->foff;
  else if (grads) *t = e->zero == 1 ? &e->full_g : &e->shard_g, *off = e->zero == 1 ? mine : g->soff;
  else *t = e->zero == 3 ? &e->shard_p : &e->full_p, *off = e->zero == 3 ? g->soff : mine;
}

/* n elements of dt between the host and the device, on libtensor's copy stream. */
static int xfer(par_engine_t *e, void *dst, int ddev, void *src, int sdev, tensor_dtype_t dt, size_t n) {
  tensor_t d = tensor_view1(dst, dt, ddev, (int64_t)n), s = tensor_view1(src, dt, sdev, (int64_t)n);
  int rc = tensor_copy_async(e->tc, &d, &s);
  return rc ? tensor_fail(e, rc) : STRATA_OK;
}

int state_copies_wait(par_engine_t *e) {
  if (!e->host_opt) return STRATA_OK;
  int rc = tensor_copy_wait(e->tc);
  return rc ? tensor_fail(e, rc) : STRATA_OK;
}

/* Queues region r's gradients (this rank's part, as the reductions left
 * them) to gstage, once a step. */
static int host_grads_out(par_engine_t *e, int r) {
  region_t *g = &e->regions[r];
  size_t n = opt_len(e, g), off;
  tensor_t *t;
  if (!n || e->d2h[r]) return STRATA_OK;
  dev_place(e, g, 1, &t, &off);
  e->d2h[r] = 1;
  return xfer(e, at(&e->gstage, opt_start(e, g)), TENSOR_CPU, at(t, off), e->device, e->wdt, n);
}

/* Region r's updated parameters to the device: the 16-bit copy the update
 * wrote into gstage (cast: rounded from the masters here first), or in an
 * fp32 run the masters themselves. On the copy stream, while the next
 * region updates; an fp32 run's masters on NVMe go at once (the tier may
 * move them after the region is released). */
static int push_params(par_engine_t *e, int r, int cast) {
  region_t *g = &e->regions[r];
  size_t n = opt_len(e, g), o = opt_start(e, g), off;
  tensor_t *t;
  int rc;
  if (!n) return STRATA_OK;
  float *mst = e->nvme ? e->res[OFF_ARRAYS * r + OFF_MASTER] : F(&e->master) + o;
  dev_place(e, g, 0, &t, &off);
  if (e->mixed) {
    tensor_t lp = tensor_view1(at(&e->gstage, o), e->wdt, TENSOR_CPU, (int64_t)n);
    tensor_t ms = tensor_view1(mst, TENSOR_F32, TENSOR_CPU, (int64_t)n);
    if (cast && (rc = tensor_cast(e->tc, &lp, &ms))) return tensor_fail(e, rc);
    return xfer(e, at(t, off), e->device, lp.data, TENSOR_CPU, e->wdt, n);
  }
  if ((rc = xfer(e, at(t, off), e->device, mst, TENSOR_CPU, TENSOR_F32, n))) return rc;
  return e->nvme ? state_copies_wait(e) : STRATA_OK;
}

/* state_resident's part: region r's fp32 gradients from gstage while the
 * step's are there (mixed); its parameters back to the device after its
 * update. */
static int host_resident_on(par_engine_t *e, int r) {
  region_t *g = &e->regions[r];
  size_t n = opt_len(e, g);
  if (!e->mixed || !e->g32_live || !n) return STRATA_OK;
  tensor_t d = tensor_view1(e->g32r.data, TENSOR_F32, TENSOR_CPU, (int64_t)n);
  tensor_t s = tensor_view1(at(&e->gstage, opt_start(e, g)), e->wdt, TENSOR_CPU, (int64_t)n);
  int rc = tensor_cast(e->tc, &d, &s);
  if (rc) return tensor_fail(e, rc);
  e->g32r_region = r;
  return STRATA_OK;
}

static int host_resident_off(par_engine_t *e, int r) {
  int rc = e->pushing ? push_params(e, r, 0) : STRATA_OK;
  if (e->g32r_region == r) e->g32r_region = -1;
  return rc;
}

/* The pinned staging of the gradients and 16-bit parameters (a manager of
 * its own: a host tier of one chunk, pinned for the engine's life), and a
 * region's fp32 gradients (mixed). */
static int open_staging(par_engine_t *e) {
  size_t n = e->zero == 0 ? e->nfull : e->nshard, most = 1, wsz = tensor_dtype_size(e->wdt);
  offload_config_t oc = OFFLOAD_CONFIG_DEFAULTS;
  char err[600];
  void *p = NULL;
  int id, rc;
  oc.chunk_bytes = round_up((n ? n : 1) * wsz, 4096);
  oc.budget[OFFLOAD_DEVICE] = 0, oc.budget[OFFLOAD_HOST] = oc.chunk_bytes, oc.budget[OFFLOAD_NVME] = 0;
  oc.cuda_device = e->device;
  if ((rc = offload_create(&e->stage_off, &oc, err, sizeof err)))
    return engine_fail(e, 1, rc, "optimizer offload: the gradients' staging: %s", err);
  if ((rc = offload_tensor_add(e->stage_off, n * wsz, &id)) || (rc = offload_access(e->stage_off, id, OFFLOAD_HOST, &p)))
    return engine_fail(e, 0, rc, "optimizer offload: the gradients' staging: %s", offload_error(e->stage_off));
  e->gstage = tensor_view1(p, e->wdt, TENSOR_CPU, (int64_t)n);
  if (!(e->d2h = calloc((size_t)e->nregions, 1)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory");
  for (int r = 0; r < e->nregions; r++)
    if (opt_len(e, &e->regions[r]) > most) most = opt_len(e, &e->regions[r]);
  if (e->mixed) {
    int64_t len = (int64_t)most;
    if ((rc = tensor_alloc(e->tc, &e->g32r, TENSOR_F32, TENSOR_CPU, 1, &len))) return tensor_fail(e, rc);
  }
  return STRATA_OK;
}

int state_resident(par_engine_t *e, int r, int on) {
  int rc0 = STRATA_OK;
  if (!e->nvme && !e->chunks && !e->host_opt) return STRATA_OK;
  /* (before the NVMe tier may take the masters back: the fp32 run's push reads them) */
  if (e->host_opt && !on && (rc0 = host_resident_off(e, r))) return rc0;
  for (int k = 0; k < 3 && (e->nvme || e->chunks); k++) {
    int id = e->off_ids[OFF_ARRAYS * r + k], rc;
    if (id < 0) continue;
    void *p = NULL;
    rc = on ? offload_access(e->off, id, OFFLOAD_HOST, &p) : offload_release(e->off, id, OFFLOAD_HOLD);
    if (rc) return engine_fail(e, 0, rc, "optimizer state of region %d: %s", r, offload_error(e->off));
    e->res[OFF_ARRAYS * r + k] = p;
  }
  if (e->host_opt && on) return host_resident_on(e, r);
  return e->chunks ? chunks_resident(e, r, on) : STRATA_OK;
}

int state_create(par_engine_t *e) {
  int rc, dp = e->size, arrays;
  e->g32_id = -1, e->g32r_region = -1;
  e->nregions = par_gpt_num_regions(e->model);
  if (!(e->regions = calloc((size_t)e->nregions, sizeof *e->regions)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory");
  for (int r = 0; r < e->nregions; r++) {
    region_t *g = &e->regions[r];
    par_gpt_region(e->model, r, &g->off, &g->n, &g->first_view, &g->nviews);
    if (!state_region_held(e, r)) g->n = 0; /* another pipeline stage's: nothing of it here */
    g->shard = round_up((g->n + (size_t)dp - 1) / (size_t)dp, ENGINE_ALIGN);
    g->foff = e->nfull, g->soff = e->nshard;
    e->nfull += (size_t)dp * g->shard, e->nshard += g->shard;
  }
  size_t np = e->zero <= 2 ? e->nfull : e->nshard, ng = e->zero <= 1 ? e->nfull : e->nshard;
  size_t no = e->zero == 0 ? e->nfull : e->nshard, wsz = tensor_dtype_size(e->wdt);
  arrays = e->state_arrays | (e->mixed || e->host_opt ? 4 : 0);
  if (e->chunks) { /* everything in liboffload's chunks */
    rc = chunks_create(e);
  } else {
    rc = e->zero <= 2 ? alloc(e, &e->full_p, e->wdt, e->nfull, "parameters")
                      : alloc(e, &e->shard_p, e->wdt, e->nshard, "parameter shard");
    if (!rc) rc = e->zero <= 1 ? alloc(e, &e->full_g, e->wdt, e->nfull, "gradients")
                               : alloc(e, &e->shard_g, e->wdt, e->nshard, "gradient shard");
    if (!rc && e->host_opt) rc = open_staging(e);
    if (!rc && e->layout.offload_optimizer == PAR_TIER_CPU) rc = offload_optimizer(e, arrays, no);
    else if (!rc && e->layout.offload_optimizer == PAR_TIER_NVME) rc = offload_nvme(e, arrays);
    else {
      if (!rc && e->mixed) rc = alloc(e, &e->master, TENSOR_F32, no, "fp32 master parameters");
      if (!rc && (arrays & 1)) rc = alloc(e, &e->m, TENSOR_F32, no, "optimizer state m");
      if (!rc && (arrays & 2)) rc = alloc(e, &e->v, TENSOR_F32, no, "optimizer state v");
    }
  }
  if (rc) return rc;
  e->state_bytes[0] = np * wsz;
  e->state_bytes[1] = ng * wsz;
  e->state_bytes[2] = (size_t)(!!(arrays & 1) + !!(arrays & 2) + !!(arrays & 4)) * no * sizeof(float);
  if ((rc = init_params(e))) return rc;
  if (e->chunks && (rc = offload_trace_restart(e->off))) /* the first step is the warm-up */
    return engine_fail(e, 0, rc, "chunks: %s", offload_error(e->off));
  for (int r = 0; r < e->nregions && !e->mixed && !e->chunks; r++) { /* fp32 stages 0-2 keep the parameters bound */
    region_t *g = &e->regions[r];
    par_gpt_bind(e->model, r, e->zero <= 2 ? F(&e->full_p) + g->foff : NULL,
                 e->zero <= 1 ? F(&e->full_g) + g->foff : NULL);
  }
  if (e->zero == 0 && dp > 1 && !e->chunks && (rc = make_buckets(e))) return rc;
  par_gpt_set_hook(e->model, hook, e);
  return state_pieces(e);
}

void state_destroy(par_engine_t *e) {
  if (!e->regions) return;
  state_release_all(e);
  release(e, &e->full_p), release(e, &e->full_g), release(e, &e->shard_p), release(e, &e->shard_g);
  chunks_destroy(e);
  free(e->off_ids), free(e->res), free(e->d2h);
  e->off_ids = NULL, e->res = NULL, e->d2h = NULL, e->nvme = 0;
  if (e->g32r.data) tensor_free(e->tc, &e->g32r);
  memset(&e->gstage, 0, sizeof e->gstage);
  offload_destroy(e->stage_off);
  e->stage_off = NULL;
  if (e->off) { /* views of the host tier's chunks */
    memset(&e->m, 0, sizeof e->m), memset(&e->v, 0, sizeof e->v), memset(&e->master, 0, sizeof e->master);
    offload_destroy(e->off);
    e->off = NULL;
  }
  release(e, &e->m), release(e, &e->v), release(e, &e->master);
  free(e->regions), free(e->bucket_lo), free(e->bucket_hi), free(e->bucket_req), free(e->pieces);
  e->regions = NULL;
}
