/* PatrickStar's chunk policy (Fang et al., arXiv 2108.05818) on the engine:
 * the parameters, gradients and optimizer state of every region are tensors
 * of liboffload's chunk manager, each kind in chunks of its own, and move
 * between the device and the host as the step needs them.
 *
 *   forward   a region's parameters come to the device at NEED (fp32: the
 *             model computes on them there, pinned until DONE; mixed
 *             precision: widened into the fp32 working copy, and at once
 *             HOLD_AFTER_FWD again);
 *   backward  the same, and its gradients: fp32, the gradient tensor on the
 *             device from NEED to GRADS; mixed, rounded at GRADS from the
 *             working copy into the 16-bit gradient tensor, which with one
 *             microbatch per step is the parameters' own place (their
 *             values live on in the fp32 masters);
 *   dp > 1    ZeRO stage 0: a gradient chunk is allreduced whole, in the
 *             layout's dtype, as soon as backward has finished every
 *             region in it, its tensors pinned until the reduction
 *             completes; ZeRO stage 3 (PatrickStar's distributed
 *             training): parameter chunk c is rank c % dp's, which alone
 *             keeps it and its regions' optimizer state; a pass first
 *             all-gathers the group of dp chunks it needs (the others'
 *             chunks given back when the pass is done with the group),
 *             and backward reduce-scatters a group's gradient chunks once
 *             it has finished them, each rank keeping its own chunk's;
 *   update    region by region on the host (the CPU optimizer): the masters,
 *             m and v, the gradients (mixed: widened into one fp32 tensor of
 *             the host tier) and the 16-bit parameters written in the same
 *             pass; then the gradients are FREE and their chunks give their
 *             memory back until the next backward (zeroed).
 *
 * Before each access the manager is told the device memory the rest of the
 * step uses at that moment (the accountant's: activations, working copies):
 * the room for chunks is the budget less that, and the first step's trace
 * drives eviction in the later ones. Every byte the step computes with is
 * the byte it computes with without the policy: losses, norms and
 * parameters are bit-identical (tests/train/offload_engine.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

int off_get(par_engine_t *e, int id, offload_tier_t tier, void **p, const char *what) {
  int rc = offload_access(e->off, id, tier, p);
  if (rc == STRATA_ENOMEM && e->chunks) { /* chunks pinned by reductions in flight: wait for them (a stall) */
    int inflight = 0;
    for (int c = 0; c < e->nchunks; c++) inflight += e->chunk_req[c] != NULL;
    if (inflight) {
      e->stalls++;
      if ((rc = chunks_progress(e, 1))) return rc;
      rc = offload_access(e->off, id, tier, p);
    }
  }
  return rc ? engine_fail(e, 0, rc, "chunks: %s: %s", what, offload_error(e->off)) : STRATA_OK;
}

int off_put(par_engine_t *e, int id, offload_state_t st) {
  offload_state_t now;
  if (id < 0 || offload_tensor_state(e->off, id, &now) || now == OFFLOAD_FREE ||
      (now != OFFLOAD_COMPUTE && st != OFFLOAD_FREE))
    return STRATA_OK; /* (not in use: nothing to give back) */
  int rc = offload_release(e->off, id, st);
  return rc ? engine_fail(e, 0, rc, "chunks: %s", offload_error(e->off)) : STRATA_OK;
}

static int *ids(par_engine_t *e, int r) { return e->off_ids + OFF_ARRAYS * r; }

int chunks_owned(const par_engine_t *e, int r) {
  return !e->sharded || (e->pchunk[r] >= 0 && e->pchunk[r] % e->size == e->rank);
}
/* The tensor that receives region r's gradients. */
static int grad_id(par_engine_t *e, int r) { return e->reuse ? ids(e, r)[OFF_PARAMS] : ids(e, r)[OFF_GRADS]; }

/* The device's memory outside the chunks now, and `extra` bytes about to
 * be taken: the manager moves chunks down until both fit the budget. */
static int reserve(par_engine_t *e, size_t extra) {
  size_t cur = 0;
  tensor_memory(e->tc, e->device, &cur, NULL);
  int rc = offload_set_other(e->off, OFFLOAD_DEVICE, cur + extra);
  return rc ? engine_fail(e, 0, rc, "chunks: %s", offload_error(e->off)) : STRATA_OK;
}

static void note_peak(par_engine_t *e) {
  size_t cur = 0;
  offload_stats_t st;
  tensor_memory(e->tc, e->device, &cur, NULL);
  offload_stats(e->off, &st);
  if (cur + st.held[OFFLOAD_DEVICE] > e->dev_peak) e->dev_peak = cur + st.held[OFFLOAD_DEVICE];
}

/* ------------------------------------------------------------ create */

/* The kinds of tensors in the order their chunk lists are packed, and the
 * optimizer state arrays' bits (par_optim_state_arrays, 4: the masters). */
static const int kind_order[] = {OFF_PARAMS, OFF_GRADS, OFF_MASTER, OFF_M, OFF_V};
static const int kind_bits[] = {0, 0, 4, 1, 2};

/* Whether the k-th kind has tensors (its optimizer array kept; gradients of their own unless reused). */
static int kind_kept(const par_engine_t *e, int k, int arrays) {
  return !(kind_bits[k] && !(arrays & kind_bits[k])) && !(kind_order[k] == OFF_GRADS && e->reuse);
}

/* Bytes of region r's tensor of a kind: 16-bit or fp32 parameters and gradients, fp32 optimizer arrays. */
static size_t kind_bytes(const par_engine_t *e, int kind, int r) {
  int lowp = kind == OFF_PARAMS || kind == OFF_GRADS;
  return e->regions[r].n * (lowp ? tensor_dtype_size(e->wdt) : sizeof(float));
}

int chunks_create(par_engine_t *e) {
  int n = e->nregions, arrays = e->state_arrays | (e->mixed ? 4 : 0), rc;
  size_t most = 0;
  e->reuse = e->mixed && e->accum == 1;
  e->g32_id = -1;
  /* the tensors in the order they are packed, each kind after a break (0) */
  size_t *sizes = calloc(OFF_ARRAYS * (size_t)(n + 1) + 1, sizeof *sizes);
  if (!sizes || !(e->off_ids = malloc(OFF_ARRAYS * (size_t)n * sizeof *e->off_ids)) ||
      !(e->res = calloc(OFF_ARRAYS * (size_t)n, sizeof *e->res)) || !(e->gchunk = malloc((size_t)n * sizeof(int))) ||
      !(e->pchunk = malloc((size_t)n * sizeof(int)))) {
    free(sizes);
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for the chunk policy's tables");
  }
  /* (every region's optimizer arrays, on every rank: the same chunk size wherever the chunks are sharded) */
  int ns = 0;
  for (int k = 0; k < OFF_ARRAYS; k++) {
    if (!kind_kept(e, k, arrays)) continue;
    for (int r = 0; r < n; r++)
      if (e->regions[r].n) {
        size_t b = kind_bytes(e, kind_order[k], r);
        sizes[ns++] = b;
        if (b > most) most = b;
      }
    sizes[ns++] = 0;
  }
  size_t max_n = 0;
  for (int r = 0; r < n; r++)
    if (e->regions[r].n > max_n) max_n = e->regions[r].n;
  if (e->mixed) sizes[ns++] = max_n * sizeof(float);
  size_t cb = (size_t)e->opts.chunk_bytes, total = 0;
  if (cb == 0) { /* PatrickStar's search: the size that wastes least */
    size_t lo = round_up(most, 4096);
    rc = offload_chunk_search(sizes, ns, lo, 4 * lo, 4096, &cb, &total);
  } else if (cb < most) {
    free(sizes);
    return engine_fail(e, 1, STRATA_EINVAL,
                       "offload.chunk_mb: chunks of %zu bytes cannot hold a region's largest tensor of %zu bytes",
                       cb, most);
  } else {
    rc = offload_chunk_search(sizes, ns, cb, cb, 1, &cb, &total);
  }
  free(sizes);
  if (rc) return engine_fail(e, 1, rc, "chunks: no chunk size holds a tensor of %zu bytes", most);
  offload_config_t oc = OFFLOAD_CONFIG_DEFAULTS;
  oc.chunk_bytes = cb;
  oc.budget[OFFLOAD_DEVICE] = (size_t)e->opts.device_bytes;
  oc.budget[OFFLOAD_HOST] = e->opts.host_bytes > 0 ? (size_t)e->opts.host_bytes : total;
  oc.budget[OFFLOAD_NVME] = 0;
  oc.cuda_device = e->device; /* (on a GPU: the device tier is its memory, the host's chunks pinned) */
  char err[600];
  if ((rc = offload_create(&e->off, &oc, err, sizeof err)))
    return engine_fail(e, 1, rc, "offload (device_mb %.1f, chunk %zu bytes): %s", e->opts.device_bytes / 1048576.0,
                       cb, err);
  e->chunks = 1, e->chunk_size = cb, e->sharded = e->zero == 3 && e->size > 1;
  for (int r = 0; r < n * OFF_ARRAYS; r++) e->off_ids[r] = -1;
  for (int r = 0; r < n; r++) e->pchunk[r] = -1;
  for (int k = 0; k < OFF_ARRAYS; k++) {
    int kind = kind_order[k];
    if (!kind_kept(e, k, arrays)) continue;
    for (int r = 0; r < n && !rc; r++) /* (the optimizer's arrays: the regions this rank keeps) */
      if (e->regions[r].n && (kind == OFF_PARAMS || kind == OFF_GRADS || chunks_owned(e, r)))
        rc = offload_tensor_add(e->off, kind_bytes(e, kind, r), &ids(e, r)[kind]);
    if (!rc && kind == OFF_PARAMS) { /* the parameter chunks: who keeps which */
      for (int r = 0; r < n; r++)
        if (e->regions[r].n) offload_tensor_place(e->off, ids(e, r)[OFF_PARAMS], &e->pchunk[r], NULL);
      offload_stats_t ps;
      offload_stats(e->off, &ps);
      e->nparams_chunks = ps.chunks;
    }
    if (!rc) rc = offload_chunk_break(e->off);
  }
  if (!rc && e->mixed) rc = offload_tensor_add(e->off, max_n * sizeof(float), &e->g32_id);
  if (rc) return engine_fail(e, 0, rc, "chunks: %s", offload_error(e->off));
  offload_stats_t st;
  offload_stats(e->off, &st);
  e->nchunks = st.chunks;
  if (!(e->chunk_left = calloc((size_t)e->nchunks, sizeof(int))) ||
      !(e->chunk_req = calloc((size_t)e->nchunks, sizeof *e->chunk_req)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for the chunk policy's tables");
  for (int r = 0; r < n; r++) {
    e->gchunk[r] = -1;
    if (e->regions[r].n) offload_tensor_place(e->off, grad_id(e, r), &e->gchunk[r], NULL);
  }
  if (e->sharded) {
    e->ngroups = (e->nparams_chunks + e->size - 1) / e->size;
    if (!(e->gathered = calloc((size_t)e->ngroups, sizeof(int))) ||
        !(e->group_left = calloc((size_t)e->ngroups, sizeof(int))) ||
        !(e->group_grads = calloc((size_t)e->ngroups, sizeof(int))))
      return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for the chunk groups");
  }
  return STRATA_OK;
}

void chunks_destroy(par_engine_t *e) {
  if (!e->chunks) return;
  for (int c = 0; c < e->nchunks && e->chunk_req; c++) comm_wait(&e->chunk_req[c]);
  free(e->gchunk), free(e->chunk_left), free(e->chunk_req), free(e->pchunk);
  free(e->gathered), free(e->group_left), free(e->group_grads);
  e->gchunk = e->chunk_left = e->pchunk = e->gathered = e->group_left = e->group_grads = NULL;
  e->chunk_req = NULL, e->chunks = 0;
}

/* ------------------------------------------------------------ sharded groups */

static int group_of(const par_engine_t *e, int r) { return e->pchunk[r] / e->size; }

/* The tensor of region r in the chunk list `grads` (0: parameters, 1: where gradients land). */
static int list_id(par_engine_t *e, int r, int grads) { return grads ? grad_id(e, r) : ids(e, r)[OFF_PARAMS]; }

/* Chunk c of a list (as parameter chunk c's index) into dst (out) or from
 * src (in), tensor by tensor at their offsets; afterwards each tensor is
 * released to st (nothing else in the chunk's bytes is read or written). */
static int chunk_copy(par_engine_t *e, int c, int grads, char *buf, int out, offload_state_t st) {
  for (int r = 0; r < e->nregions; r++) {
    if (e->pchunk[r] != c) continue;
    int id = list_id(e, r, grads), rc;
    void *p;
    size_t off;
    if ((rc = off_get(e, id, OFFLOAD_DEVICE, &p, grads ? "gradients to reduce" : "parameters to gather"))) return rc;
    offload_tensor_place(e->off, id, NULL, &off);
    /* (device memory on a GPU: libtensor's copies, in order with the passes' work) */
    tensor_t c = tensor_view1(p, e->wdt, e->device, (int64_t)e->regions[r].n);
    tensor_t b = tensor_view1(buf + off, e->wdt, e->device, (int64_t)e->regions[r].n);
    if ((rc = out ? tensor_copy(e->tc, &b, &c) : tensor_copy(e->tc, &c, &b)))
      return engine_fail(e, 0, rc, "chunks: %s", tensor_last_error(e->tc));
    if ((rc = off_put(e, id, st))) return rc;
  }
  return STRATA_OK;
}

/* Brings group g's other chunks: one all-gather of the group's dp chunks. */
static int gather(par_engine_t *e, int g, int backward) {
  int dp = e->size, own = g * dp + e->rank, rc;
  size_t cb = e->chunk_size;
  offload_state_t hold = backward ? OFFLOAD_HOLD_AFTER_BWD : OFFLOAD_HOLD_AFTER_FWD;
  tensor_t s = {0};
  if ((rc = reserve(e, dp * cb)) || (rc = state_take(e, &s, TENSOR_F32, dp * cb / 4, "the chunk group's gather")))
    return rc;
  char *buf = s.data;
  if (own < e->nparams_chunks && (rc = chunk_copy(e, own, 0, buf + e->rank * cb, 1, hold))) goto done;
  note_peak(e);
  if ((rc = comm_allgather(e->comm, buf, buf + e->rank * cb, cb, COMM_U8))) {
    rc = engine_fail(e, 0, rc, "%s", comm_last_error(e->comm));
    goto done;
  }
  for (int j = 0; j < dp && !rc; j++)
    if (j != e->rank && g * dp + j < e->nparams_chunks) rc = chunk_copy(e, g * dp + j, 0, buf + j * cb, 0, hold);
  e->gathered[g] = 1, e->group_left[g] = 0;
  for (int r = 0; r < e->nregions; r++) e->group_left[g] += e->regions[r].n && group_of(e, r) == g;
done:
  state_give_back(e, &s);
  return rc;
}

/* Group g's gradient chunks reduce-scattered: this rank's chunk receives
 * the mean, the others' are given back. */
static int reduce_group(par_engine_t *e, int g) {
  int dp = e->size, own = g * dp + e->rank, rc;
  size_t cb = e->chunk_size;
  tensor_t s = {0}, d = {0};
  if ((rc = reserve(e, (dp + 1) * cb)) ||
      (rc = state_take(e, &s, TENSOR_F32, dp * cb / 4, "the chunk group's gradients")) ||
      (rc = state_take(e, &d, TENSOR_F32, cb / 4, "this rank's reduced gradient chunk")))
    goto done;
  char *buf = s.data;
  for (int j = 0; j < dp && !rc; j++)
    if (g * dp + j < e->nparams_chunks) rc = chunk_copy(e, g * dp + j, 1, buf + j * cb, 1, OFFLOAD_HOLD_AFTER_BWD);
  note_peak(e);
  if (rc) goto done;
  if (e->t_first_post == 0) e->t_first_post = engine_now();
  if ((rc = comm_reduce_scatter(e->comm, d.data, buf, cb / tensor_dtype_size(e->wdt), e->cdt, COMM_AVG))) {
    rc = engine_fail(e, 0, rc, "%s", comm_last_error(e->comm));
    goto done;
  }
  if (own < e->nparams_chunks && (rc = chunk_copy(e, own, 1, d.data, 0, OFFLOAD_HOLD_AFTER_BWD))) goto done;
  for (int r = 0; r < e->nregions && !rc; r++) /* the others' gradients are theirs now */
    if (e->regions[r].n && group_of(e, r) == g && !chunks_owned(e, r)) rc = off_put(e, grad_id(e, r), OFFLOAD_FREE);
done:
  state_give_back(e, &s), state_give_back(e, &d);
  return rc;
}

/* The others' parameter chunks of group g given back (the pass is done with them). */
static int release_group(par_engine_t *e, int g) {
  int rc = STRATA_OK;
  for (int r = 0; r < e->nregions && !rc; r++)
    if (e->regions[r].n && group_of(e, r) == g && !chunks_owned(e, r)) rc = off_put(e, ids(e, r)[OFF_PARAMS], OFFLOAD_FREE);
  e->gathered[g] = 0;
  return rc;
}

/* ------------------------------------------------------------ passes */

int chunks_need(par_engine_t *e, int r, int backward) {
  region_t *g = &e->regions[r];
  int rc, *id = ids(e, r);
  offload_state_t hold = backward ? OFFLOAD_HOLD_AFTER_BWD : OFFLOAD_HOLD_AFTER_FWD;
  void *p = NULL, *gp = NULL;
  size_t extra = e->mixed ? (g->wp.data ? 0 : g->n * 4) + (backward && !g->wg.data ? g->n * 4 : 0) : 0;
  if (e->sharded && !e->gathered[group_of(e, r)] && (rc = gather(e, group_of(e, r), backward))) return rc;
  if ((rc = reserve(e, extra)) || (rc = off_get(e, id[OFF_PARAMS], OFFLOAD_DEVICE, &p, "parameters"))) return rc;
  float *params = p, *grads = NULL;
  if (e->mixed) { /* the fp32 working copy; the 16-bit chunk may move again */
    tensor_t lp = tensor_view1(p, e->wdt, e->device, (int64_t)g->n);
    if (!g->wp.data && ((rc = state_take(e, &g->wp, TENSOR_F32, g->n, "fp32 working parameters")) ||
                        (rc = state_convert(e, &g->wp, 0, &lp, 0, g->n))))
      return rc;
    if ((rc = off_put(e, id[OFF_PARAMS], hold))) return rc;
    if (backward && !g->wg.data && (rc = state_take(e, &g->wg, TENSOR_F32, g->n, "fp32 working gradients")))
      return rc;
    params = g->wp.data, grads = backward ? g->wg.data : NULL;
  } else if (backward) {
    if ((rc = off_get(e, id[OFF_GRADS], OFFLOAD_DEVICE, &gp, "gradients"))) return rc;
    grads = gp;
  }
  note_peak(e);
  return par_gpt_bind(e->model, r, params, grads);
}

/* Posts chunk c's allreduce: every gradient tensor in it pinned on the device. */
static int post_chunk(par_engine_t *e, int c) {
  char *base = NULL;
  size_t end = 0;
  int rc;
  for (int r = 0; r < e->nregions; r++) {
    if (e->gchunk[r] != c) continue;
    void *p;
    size_t off;
    if ((rc = off_get(e, grad_id(e, r), OFFLOAD_DEVICE, &p, "gradients to reduce"))) return rc;
    offload_tensor_place(e->off, grad_id(e, r), NULL, &off);
    base = (char *)p - off;
    size_t stop = off + e->regions[r].n * tensor_dtype_size(e->wdt);
    if (stop > end) end = stop;
  }
  note_peak(e);
  if (e->t_first_post == 0) e->t_first_post = engine_now();
  rc = comm_iallreduce(e->comm, base, base, end / tensor_dtype_size(e->wdt), e->cdt, COMM_AVG, &e->chunk_req[c]);
  return rc ? engine_fail(e, 0, rc, "%s", comm_last_error(e->comm)) : STRATA_OK;
}

int chunks_grads(par_engine_t *e, int r) {
  region_t *g = &e->regions[r];
  int rc, gid = grad_id(e, r);
  if (r == 0 && e->reducing) e->t_backward_end = engine_now();
  if (e->mixed) { /* rounded into the 16-bit gradients (added to the earlier microbatches') */
    void *p;
    if ((rc = reserve(e, e->microbatch > 0 ? 2 * g->n * 4 : 0)) ||
        (rc = off_get(e, gid, OFFLOAD_DEVICE, &p, "gradients")))
      return rc;
    tensor_t lg = tensor_view1(p, e->wdt, e->device, (int64_t)g->n);
    rc = e->microbatch == 0 ? state_convert(e, &lg, 0, &g->wg, 0, g->n) : state_accumulate(e, &lg, 0, &g->wg, 0, g->n);
    if (rc) return rc;
  }
  if (e->mixed && (rc = off_put(e, gid, OFFLOAD_HOLD_AFTER_BWD))) return rc;
  if (e->sharded) return --e->group_grads[group_of(e, r)] == 0 ? reduce_group(e, group_of(e, r)) : STRATA_OK;
  if (e->size > 1 && e->reducing && --e->chunk_left[e->gchunk[r]] == 0) return post_chunk(e, e->gchunk[r]);
  return STRATA_OK;
}

int chunks_done(par_engine_t *e, int r, int backward) {
  region_t *g = &e->regions[r];
  int rc = STRATA_OK;
  if (e->mixed) {
    state_give_back(e, &g->wp), state_give_back(e, &g->wg);
  } else {
    rc = off_put(e, ids(e, r)[OFF_PARAMS], backward ? OFFLOAD_HOLD_AFTER_BWD : OFFLOAD_HOLD_AFTER_FWD);
    if (!rc && backward && !e->chunk_req[e->gchunk[r]]) rc = off_put(e, ids(e, r)[OFF_GRADS], OFFLOAD_HOLD_AFTER_BWD);
  }
  par_gpt_bind(e->model, r, NULL, NULL);
  if (!rc && e->sharded && e->gathered[group_of(e, r)] && --e->group_left[group_of(e, r)] == 0)
    rc = release_group(e, group_of(e, r));
  return rc;
}

int chunks_progress(par_engine_t *e, int wait) {
  int rc = STRATA_OK;
  for (int c = 0; c < e->nchunks; c++) {
    if (!e->chunk_req[c]) continue;
    int done = 1, w = wait ? comm_wait(&e->chunk_req[c]) : comm_test(&e->chunk_req[c], &done);
    if (w != STRATA_OK) {
      if (!rc) rc = engine_fail(e, 0, w, "%s", comm_last_error(e->comm));
      continue;
    }
    if (!done) continue;
    if (e->t_first_done == 0) e->t_first_done = engine_now();
    for (int r = 0; r < e->nregions; r++) /* its tensors may move again */
      if (e->gchunk[r] == c && (w = off_put(e, grad_id(e, r), OFFLOAD_HOLD_AFTER_BWD)) && !rc) rc = w;
  }
  return rc;
}

/* ------------------------------------------------------------ steps */

static int free_grads(par_engine_t *e) {
  int rc = STRATA_OK;
  for (int r = 0; r < e->nregions && !e->reuse && !rc; r++) rc = off_put(e, ids(e, r)[OFF_GRADS], OFFLOAD_FREE);
  return rc;
}

int chunks_begin_step(par_engine_t *e) {
  for (int c = 0; c < e->nchunks; c++) e->chunk_left[c] = 0;
  for (int r = 0; r < e->nregions; r++)
    if (e->gchunk[r] >= 0) e->chunk_left[e->gchunk[r]]++;
  for (int g = 0; g < e->ngroups; g++) e->group_grads[g] = 0;
  for (int r = 0; r < e->nregions && e->sharded; r++)
    if (e->regions[r].n) e->group_grads[group_of(e, r)]++;
  e->updated = 0, e->grads_live = 0;
  return free_grads(e);
}

int chunks_end_step(par_engine_t *e) {
  int rc = chunks_progress(e, 1);
  for (int r = 0; r < e->nregions; r++) { /* what a failed pass left in use */
    int w = off_put(e, ids(e, r)[OFF_PARAMS], OFFLOAD_HOLD);
    if (!w) w = off_put(e, grad_id(e, r), OFFLOAD_HOLD);
    if (w && !rc) rc = w;
  }
  for (int g = 0; g < e->ngroups; g++) { /* (a failed pass may have left a group here) */
    int w = release_group(e, g);
    if (w && !rc) rc = w;
  }
  e->grads_live = 0;
  /* the gradients took the 16-bit parameters' place: without an update they come back from the masters */
  if (e->reuse && !e->updated) {
    int w = state_sync_lowp(e);
    if (!rc) rc = w;
  }
  int w = free_grads(e);
  if (!rc) rc = w;
  if (!rc && (w = offload_iteration_end(e->off))) rc = engine_fail(e, 0, w, "chunks: %s", offload_error(e->off));
  return rc;
}

int chunks_resident(par_engine_t *e, int r, int on) {
  int rc, *id = ids(e, r), gid = grad_id(e, r);
  float **res = e->res + OFF_ARRAYS * r;
  void *p = NULL, *gp = NULL;
  if (!chunks_owned(e, r)) return STRATA_OK; /* (another rank keeps it) */
  if (!on) {
    res[OFF_PARAMS] = res[OFF_GRADS] = NULL, e->g32_res = NULL;
    if ((rc = off_put(e, id[OFF_PARAMS], OFFLOAD_HOLD)) || (gid != id[OFF_PARAMS] && (rc = off_put(e, gid, OFFLOAD_HOLD))))
      return rc;
    return e->g32_id >= 0 ? off_put(e, e->g32_id, OFFLOAD_FREE) : STRATA_OK;
  }
  if ((rc = off_get(e, id[OFF_PARAMS], OFFLOAD_HOST, &p, "parameters for the update"))) return rc;
  res[OFF_PARAMS] = p;
  if (gid != id[OFF_PARAMS] && e->grads_live) {
    if ((rc = off_get(e, gid, OFFLOAD_HOST, &gp, "gradients for the update"))) return rc;
    res[OFF_GRADS] = gp;
  } else if (e->grads_live) {
    res[OFF_GRADS] = p;
  }
  if (e->mixed && e->grads_live) { /* widened for the CPU optimizer */
    void *w;
    if ((rc = off_get(e, e->g32_id, OFFLOAD_HOST, &w, "fp32 gradients"))) return rc;
    e->g32_res = w;
    tensor_t d = tensor_view1(w, TENSOR_F32, TENSOR_CPU, (int64_t)e->regions[r].n); /* (on the host) */
    tensor_t s = tensor_view1(res[OFF_GRADS], e->wdt, TENSOR_CPU, (int64_t)e->regions[r].n);
    if ((rc = tensor_cast(e->tc, &d, &s))) return engine_fail(e, 0, rc, "chunks: %s", tensor_last_error(e->tc));
  }
  return STRATA_OK;
}

/* ------------------------------------------------------------ whole parameters */

int chunks_get_params(par_engine_t *e, float *out) {
  int rc = STRATA_OK;
  for (int r = 0; r < e->nregions && !rc; r++) {
    region_t *g = &e->regions[r];
    if (!g->n) continue;
    if (chunks_owned(e, r)) { /* the fp32 values: the masters, or the parameters */
      if ((rc = state_resident(e, r, 1))) break;
      const float *src = e->mixed ? e->res[OFF_ARRAYS * r + OFF_MASTER] : e->res[OFF_ARRAYS * r + OFF_PARAMS];
      memcpy(out + g->off, src, g->n * sizeof(float));
      if ((rc = state_resident(e, r, 0))) break;
    }
    if (e->sharded && (rc = comm_broadcast(e->comm, out + g->off, g->n, COMM_F32, e->pchunk[r] % e->size)))
      rc = engine_fail(e, 0, rc, "%s", comm_last_error(e->comm));
  }
  return rc;
}
