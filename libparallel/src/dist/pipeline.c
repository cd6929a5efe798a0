/* Pipeline parallelism in the engine (layout.pp > 1): each rank is one
 * stage of a pipeline group (the ranks with its data and tensor
 * coordinates) and runs its part of the schedule (strata/par_pipe.h, built
 * once, only followed here): the forward or backward of one microbatch
 * through one of its chunks, op after op.
 *
 * Messages. A chunk that is not the first virtual stage receives its input
 * activations from the previous one, and one that is not the last sends
 * its output to the next; in backward the gradients go the other way. Each
 * is one message of the microbatch's B T h activations (under sequence
 * parallelism this rank's B T h / t) in the model's activation dtype (f32;
 * bf16 or f16 on a device with par_engine_options_t.activations: half the
 * bytes, copied into and out of the model's 16-bit buffers as they are), with libcomm's non-blocking send and
 * receive, posted in the schedule's lock-step rounds (par_pipe_rounds): a
 * round's operation runs (waiting first for the receive of its input, and
 * for the send that last read a buffer it is about to rewrite), then the
 * round's messages, those its operation produced and those the neighbours'
 * operations of the same round produced for it, are posted as one group
 * (comm_flush), in the order every stage derives from the same schedule. A
 * message so arrives before the operation that uses it, while the model's
 * buffer for it may still be in use (the output gradient's is one for all
 * slots; a first-chunk input's slot may not be taken yet): it lands in one
 * of a few boundary buffers of the engine (as many as the rounds ever hold
 * in flight, two or three) and its operation copies it into the model. On
 * a device NCCL ignores tags and
 * pairs sends with receives in call order, a group running after the
 * previous one on the communicator's stream: the rounds make every stage's
 * k-th send to a peer the peer's k-th receive from it, and every group's
 * partners the same round's groups, so no group waits on a later one
 * (strata/par_pipe.h argues it). On the CPU all of them carry one tag, so
 * that MPI pairs them in call order too (its messages from one sender with
 * one tag never overtake each other): the CPU tests run the very order a
 * device run uses, and a disagreement shows as wrong activations there.
 *
 * Other communicators. A device runs the data-parallel reductions (and
 * ZeRO's gathers, the tensor group's collectives) on other NCCL
 * communicators than the pipeline's, each on its own stream; NCCL may
 * deadlock when two ranks launch operations of two communicators in
 * different orders (its documentation asks for one order on every rank).
 * Here every launch happens at a point of the rank's program that the
 * schedule alone fixes, never on a timing: the model's hooks post the
 * reductions inside a round's operation, the round's pipeline group is
 * flushed after it, comm_test only completes what is posted, and a failed
 * rank replays the same posts (state_replay_backward). Every rank of a data
 * or tensor group is the same stage running the same rounds, so they all
 * launch the same sequence: round t's collectives, round t's pipeline
 * group, round t + 1's collectives, ...; each of those completes once its
 * group's ranks reach it, which by induction on the rounds they do. The
 * step's remaining reductions are waited for after the last round, and the
 * tied embedding's sum (first and last stages) after every pipeline send
 * has completed.
 *
 * Activations. Each microbatch in flight on the stage has its own set in
 * the model (a slot), taken at its first forward here and given back after
 * its last backward: at most p for 1F1B, m for GPipe (counted from the
 * schedule, allocated as first used, measured by the accountant).
 *
 * Gradients. The data-parallel reductions are posted from the model's
 * hooks during each region's last microbatch, as without a pipeline; the
 * last stage holds a copy of the tied embedding for the head, whose
 * gradient is summed with the first stage's after the step (Megatron's
 * embedding group), so both apply the same update. Norms count the copy
 * once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"

static int pfail(par_engine_t *e, comm_t *c, int rc) { return engine_fail(e, 0, rc, "%s", comm_last_error(c)); }

static int model_fail(par_engine_t *e, int rc, const char *what) {
  return engine_fail(e, 0, rc, "%s: %s", what, par_gpt_last_error(e->model));
}

int pipe_create(par_engine_t *e) {
  char err[512];
  int m = e->accum, p = e->pp, v = e->interleave, rc;
  if ((rc = par_pipe_create(&e->pipe, e->layout.schedule, p, m, v, err, sizeof err)))
    return engine_fail(e, 1, rc, "layout: %s", err);
  /* A microbatch's first operation on a stage is its forward through
   * chunk 0, its last the backward through chunk 0. */
  const par_pipe_op_t *ops;
  int n = par_pipe_ops(e->pipe, e->stage, &ops), live = 0;
  for (int i = 0; i < n; i++)
    if (ops[i].chunk == 0) {
      live += ops[i].kind == PAR_PIPE_FORWARD ? 1 : -1;
      if (live > e->nslots) e->nslots = live;
    }
  /* Messages received and not yet used, at most (an operation uses its
   * input before its round's messages are posted) */
  const par_pipe_round_t *R;
  int nr = par_pipe_rounds(e->pipe, e->stage, &R), waiting = 0, P = p * v;
  for (int r = 0; r < nr; r++) {
    const par_pipe_op_t *o = R[r].op >= 0 ? &ops[R[r].op] : NULL;
    int vs = o ? o->chunk * p + e->stage : 0;
    if (o && (o->kind == PAR_PIPE_FORWARD ? vs > 0 : vs < P - 1)) waiting--;
    for (int i = 0; i < R[r].nmsgs; i++) waiting += !R[r].msgs[i].send;
    if (waiting > e->nland) e->nland = waiting;
  }
  if ((rc = par_gpt_set_slots(e->model, e->nslots))) return model_fail(e, rc, "pipeline");
  size_t bt = (size_t)e->layout.microbatch * (size_t)e->seq, ns = (size_t)e->nslots * (size_t)v;
  e->boundary = bt * (size_t)e->mc.hidden / (e->layout.seq_parallel ? (size_t)e->tp_size : 1);
  /* the model's activation dtype (it refused 16 bits anywhere but on a device) */
  e->bdt = (tensor_dtype_t)par_gpt_act_dtype(e->model);
  e->bcdt = e->bdt == TENSOR_BF16 ? COMM_BF16 : e->bdt == TENSOR_F16 ? COMM_F16 : COMM_F32;
  if (!(e->slot_of = malloc(((size_t)m + (size_t)e->nslots) * sizeof *e->slot_of)) ||
      !(e->in_all = malloc((size_t)m * bt * sizeof *e->in_all)) ||
      !(e->tg_all = malloc((size_t)m * bt * sizeof *e->tg_all)) || !(e->gsend = calloc(ns, sizeof *e->gsend)) ||
      !(e->fsend = calloc(ns, sizeof *e->fsend)) || !(e->bsend = calloc(ns, sizeof *e->bsend)) ||
      !(e->unsent = calloc(ns, sizeof *e->unsent)) || !(e->land = calloc((size_t)e->nland + 1, sizeof *e->land)) ||
      !(e->land_req = calloc((size_t)e->nland + 1, sizeof *e->land_req)) ||
      !(e->land_of = malloc((2 * (size_t)m * (size_t)v + (size_t)e->nland) * sizeof *e->land_of)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for a pipeline of %d microbatches", m);
  /* A failed rank's stand-in for the boundary buffers lives where they do:
   * on a device its messages must go through NCCL as its peers' do. */
  if (e->device >= 0) {
    tensor_t t;
    int64_t nb = (int64_t)e->boundary;
    if ((rc = tensor_alloc(e->tc, &t, e->bdt, e->device, 1, &nb)))
      return engine_fail(e, 0, rc, "pipeline: %s", tensor_last_error(e->tc));
    e->dry = t.data;
  } else if (!(e->dry = calloc(e->boundary, tensor_dtype_size(e->bdt)))) {
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for a pipeline of %d microbatches", m);
  }
  return STRATA_OK;
}

/* Completes every message posted (the sends a step leaves in flight; after
 * a failure, the receives too: the other stages post the same rounds). */
static void wait_sends(par_engine_t *e) {
  size_t ns = (size_t)e->nslots * (size_t)e->interleave;
  for (size_t i = 0; e->fsend && i < ns; i++) comm_wait(&e->fsend[i]), comm_wait(&e->bsend[i]);
  for (int i = 0; e->land_req && i < e->nland; i++) comm_wait(&e->land_req[i]);
}

/* A boundary buffer of boundary_buffer's. */
static void free_boundary(par_engine_t *e, void *p) {
  if (!p) return;
  tensor_t t = tensor_view1(p, e->bdt, e->device, (int64_t)e->boundary);
  t.owned = 1; /* (tensor_alloc's: a view would be left alone) */
  tensor_free(e->tc, &t);
}

void pipe_destroy(par_engine_t *e) {
  if (!e->pipe) return;
  wait_sends(e);
  for (size_t i = 0; e->gsend && i < (size_t)e->nslots * (size_t)e->interleave; i++) free_boundary(e, e->gsend[i]);
  par_pipe_destroy(e->pipe);
  if (e->dry && e->device >= 0) {
    tensor_t t = tensor_view1(e->dry, e->bdt, e->device, (int64_t)e->boundary);
    t.owned = 1;
    tensor_free(e->tc, &t);
  } else {
    free(e->dry);
  }
  e->dry = NULL;
  free(e->slot_of), free(e->in_all), free(e->tg_all), free(e->gsend), free(e->fsend), free(e->bsend);
  for (int i = 0; e->land && i < e->nland; i++) free_boundary(e, e->land[i]);
  free(e->unsent), free(e->land), free(e->land_req), free(e->land_of);
  e->pipe = NULL;
}

/* The one tag of the step's messages (see "Messages" above). */
#define STEP_TAG 1

static int wait_msg(par_engine_t *e, comm_request_t **r) {
  int rc = comm_wait(r);
  return rc ? pfail(e, e->ppc, rc) : STRATA_OK;
}

/* A computed message whose round has not come yet is never waited for: the
 * rounds put every message before the operations that wait for it (tests/plan
 * checks it for every schedule); this says so should that ever break. */
static int unposted(par_engine_t *e, const char *what, int mb, int c) {
  return engine_fail(e, 0, STRATA_EINVAL,
                     "pipeline: the %s of microbatch %d, chunk %d is needed again before its round posted it "
                     "(the schedule's rounds are inconsistent)", what, mb, c);
}

/* *p: a boundary buffer (the send buffer of an input gradient, a
 * first-chunk input's landing place), allocated on first use where the
 * model computes (counted by the accountant with the activations). */
static void *boundary_buffer(par_engine_t *e, void **p) {
  if (!*p) {
    tensor_t t;
    int64_t n = (int64_t)e->boundary;
    if (tensor_alloc(e->tc, &t, e->bdt, e->device, 1, &n) == STRATA_OK) *p = t.data;
  }
  return *p;
}

static void delay(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  if (s > 0) nanosleep(&ts, NULL);
}

/* The landing buffer of message (kind, microbatch, chunk at this end). */
static int *land_key(par_engine_t *e, int kind, int mb, int c) {
  return &e->land_of[((size_t)kind * e->accum + (size_t)mb) * e->interleave + (size_t)c];
}

/* Waits for the landed input of an operation and copies it into the
 * model's buffer `to` (NULL: the rank failed earlier; only waited for). */
static int use_landed(par_engine_t *e, int kind, int mb, int c, void *to, int *failed) {
  int x = *land_key(e, kind, mb, c), rc;
  if (x < 0) return unposted(e, kind == PAR_PIPE_FORWARD ? "input (not received)" : "output gradient (not received)",
                             mb, c); /* cannot happen: the rounds post it first */
  if ((rc = wait_msg(e, &e->land_req[x]))) return rc;
  e->land_of[2 * (size_t)e->accum * e->interleave + (size_t)x] = 0;
  if (!*failed && to) {
    tensor_t d = tensor_view1(to, e->bdt, e->device, (int64_t)e->boundary);
    tensor_t s = tensor_view1(e->land[x], e->bdt, e->device, (int64_t)e->boundary);
    if ((rc = tensor_copy(e->tc, &d, &s))) *failed = engine_fail(e, 0, rc, "%s", tensor_last_error(e->tc));
  }
  return STRATA_OK;
}

static int take_slot(par_engine_t *e, int mb) {
  int *busy = e->slot_of + e->accum;
  if (e->slot_of[mb] >= 0) return e->slot_of[mb];
  for (int s = 0; s < e->nslots; s++)
    if (!busy[s]) {
      busy[s] = 1;
      return e->slot_of[mb] = s;
    }
  return -1; /* cannot happen: the schedule has at most nslots in flight */
}

/* One operation of the schedule; its messages go out with its round's. *failed:
 * this rank failed earlier in the step (it passes the messages on without
 * computing); set here when the model fails. Returns an error only when the
 * messages failed. */
static int run_op(par_engine_t *e, const par_pipe_op_t *o, int *failed, double *lsum) {
  int p = e->pp, v = e->interleave, P = p * v, B = e->layout.microbatch, rc, first, count, embeds, head;
  int c = o->chunk, mb = o->microbatch, vs = c * p + e->stage;
  size_t bt = (size_t)B * (size_t)e->seq, n;
  par_gpt_stage_chunk(e->model, c, &first, &count, &embeds, &head);
  e->microbatch = mb;
  e->reducing = o->kind == PAR_PIPE_BACKWARD && mb == e->accum - 1; /* each region's last microbatch */
  e->events = 0;
  if (o->kind == PAR_PIPE_FORWARD) {
    int slot = take_slot(e, mb);
    size_t k = (size_t)slot * v + c;
    if (vs > 0) {
      void *in = *failed ? NULL : par_gpt_stage_buffer(e->model, slot, c, PAR_GPT_IN, B, e->seq, &n);
      if (!*failed && !in) *failed = model_fail(e, STRATA_ENOMEM, "pipeline input");
      if ((rc = use_landed(e, PAR_PIPE_FORWARD, mb, c, in, failed))) return rc;
    }
    float loss = 0;
    double t0 = engine_now();
    delay(e->opts.delay_ops_s / v);
    if (!*failed && (rc = par_gpt_stage_forward(e->model, slot, c, e->in_all + (size_t)mb * bt,
                                                e->tg_all + (size_t)mb * bt, B, e->seq, &loss)))
      *failed = e->hook_rc ? rc : model_fail(e, rc, "forward");
    e->t_busy += engine_now() - t0;
    if (e->hook_rc) return e->hook_rc;
    if (!*failed && head) *lsum += loss;
    if (vs < P - 1) e->unsent[k] |= 1;
    return STRATA_OK;
  }
  int slot = e->slot_of[mb];
  size_t k = (size_t)slot * v + c;
  /* the output sent in forward is rewritten by a recomputation: sent first */
  if (e->unsent[k] & 1) return unposted(e, "output", mb, c);
  if ((rc = wait_msg(e, &e->fsend[k]))) return rc;
  if (vs < P - 1) {
    void *d = *failed ? NULL : par_gpt_stage_buffer(e->model, slot, c, PAR_GPT_DOUT, B, e->seq, &n);
    if ((rc = use_landed(e, PAR_PIPE_BACKWARD, mb, c, d, failed))) return rc;
  }
  double t0 = engine_now();
  delay(2 * e->opts.delay_ops_s / v);
  if (!*failed && (rc = par_gpt_stage_backward(e->model, slot, c)))
    *failed = e->hook_rc ? rc : model_fail(e, rc, "backward");
  e->t_busy += engine_now() - t0;
  if (e->hook_rc) return e->hook_rc;
  /* a failed rank still posts the reductions the others post */
  if (*failed && (rc = state_replay_backward(e, e->events, first, first + count))) return rc;
  if (vs > 0) { /* into the send buffer, free once its last message has gone */
    if (e->unsent[k] & 2) return unposted(e, "input gradient", mb, c);
    if ((rc = wait_msg(e, &e->bsend[k]))) return rc;
    void *g = *failed ? NULL : boundary_buffer(e, &e->gsend[k]), *din = NULL;
    if (!*failed && !g) *failed = engine_fail(e, 0, STRATA_ENOMEM, "out of memory: pipeline gradient buffer");
    if (!*failed) {
      din = par_gpt_stage_buffer(e->model, slot, c, PAR_GPT_DIN, B, e->seq, &n);
      tensor_t d = tensor_view1(g, e->bdt, e->device, (int64_t)e->boundary);
      tensor_t s = tensor_view1(din, e->bdt, e->device, (int64_t)e->boundary);
      if ((rc = tensor_copy(e->tc, &d, &s))) *failed = engine_fail(e, 0, rc, "%s", tensor_last_error(e->tc));
    }
    e->unsent[k] |= 2;
  }
  if (c == 0) e->slot_of[e->accum + slot] = 0; /* its last operation here (slot_of[mb] stays: its messages) */
  return STRATA_OK;
}

/* Posts a round's messages, in the round's order, as one group. */
static int post_round(par_engine_t *e, const par_pipe_round_t *R, int *failed) {
  int p = e->pp, v = e->interleave, B = e->layout.microbatch, rc;
  size_t n;
  for (int i = 0; i < R->nmsgs; i++) {
    const par_pipe_msg_t *g = &R->msgs[i];
    int fwd = g->kind == PAR_PIPE_FORWARD, mb = g->microbatch;
    int vs = g->send ? g->from : fwd ? g->from + 1 : g->from - 1, c = vs / p; /* this stage's end */
    void *buf = NULL;
    if (!g->send) { /* into a landing buffer: its operation copies it into the model */
      int x = 0, *busy = e->land_of + 2 * (size_t)e->accum * v;
      while (x < e->nland && busy[x]) x++;
      if (x == e->nland) return unposted(e, "message (no landing buffer free)", mb, c); /* cannot happen */
      busy[x] = 1, *land_key(e, g->kind, mb, c) = x;
      if (!*failed && !(buf = boundary_buffer(e, &e->land[x])))
        *failed = engine_fail(e, 0, STRATA_ENOMEM, "out of memory: pipeline landing buffer");
      rc = comm_irecv(e->ppc, buf ? buf : e->dry, e->boundary, e->bcdt, g->peer, STEP_TAG, &e->land_req[x]);
    } else {
      int slot = e->slot_of[mb];
      size_t k = (size_t)slot * v + c;
      if (!*failed) buf = fwd ? par_gpt_stage_buffer(e->model, slot, c, PAR_GPT_OUT, B, e->seq, &n) : e->gsend[k];
      e->unsent[k] &= (unsigned char)(fwd ? ~1u : ~2u);
      rc = comm_isend(e->ppc, buf ? buf : e->dry, e->boundary, e->bcdt, g->peer, STEP_TAG,
                      fwd ? &e->fsend[k] : &e->bsend[k]);
    }
    if (rc) return pfail(e, e->ppc, rc);
  }
  if (R->nmsgs && (rc = comm_flush(e->ppc))) return pfail(e, e->ppc, rc);
  return STRATA_OK;
}

int pipe_local_step(par_engine_t *e, par_data_t *data, double *loss_out) {
  int rc, failed = STRATA_OK, B = e->layout.microbatch, m = e->accum;
  size_t bt = (size_t)B * (size_t)e->seq;
  char msg[sizeof e->err] = "";
  double lsum = 0;
  e->t_busy = 0;
  if ((rc = state_zero_grads(e))) return rc;
  for (int k = 0; k < m && !failed; k++) /* every stage reads them: the data position stays the run's */
    if ((rc = par_data_next(data, e->rank, e->size, B, e->in_all + (size_t)k * bt, e->tg_all + (size_t)k * bt)))
      failed = engine_fail(e, 0, rc, "data: %s", par_data_error(data));
  for (int k = 0; k < m + e->nslots; k++) e->slot_of[k] = k < m ? -1 : 0;
  memset(e->unsent, 0, (size_t)e->nslots * (size_t)e->interleave);
  for (int k = 0; k < 2 * m * e->interleave + e->nland; k++) e->land_of[k] = k < 2 * m * e->interleave ? -1 : 0;
  const par_pipe_op_t *ops;
  const par_pipe_round_t *R;
  int nr = par_pipe_rounds(e->pipe, e->stage, &R);
  par_pipe_ops(e->pipe, e->stage, &ops);
  for (int r = 0; r < nr; r++) {
    int was = failed;
    if ((R[r].op >= 0 && (rc = run_op(e, &ops[R[r].op], &failed, &lsum))) || (rc = post_round(e, &R[r], &failed))) {
      wait_sends(e);
      return rc;
    }
    if (failed && !was) snprintf(msg, sizeof msg, "%s", e->err);
  }
  wait_sends(e);
  if ((rc = state_finish_reductions(e)) || (rc = pipe_tied_grads(e))) return rc;
  if (failed) {
    snprintf(e->err, sizeof e->err, "%s", msg);
    return failed;
  }
  *loss_out = e->stage == e->pp - 1 ? lsum / m : 0;
  return STRATA_OK;
}

int pipe_tied_grads(par_engine_t *e) {
  if (!e->embc) return STRATA_OK;
  const region_t *g = &e->regions[0];
  size_t wte = par_gpt_view(e->model, 0)->numel, lo = 0, hi = wte;
  if (e->zero >= 1) { /* this rank's shard of the region, where its part of wte is */
    lo = (size_t)e->rank * g->shard, hi = lo + g->shard;
    if (hi > wte) hi = wte;
  }
  if (lo >= hi) return STRATA_OK;
  void *p = (char *)e->full_g.data + (g->foff + lo) * tensor_dtype_size(e->full_g.dtype);
  int rc = comm_allreduce(e->embc, p, p, hi - lo, e->cdt, COMM_SUM);
  return rc ? pfail(e, e->embc, rc) : STRATA_OK;
}

int pipe_sum_views(par_engine_t *e, double *vsq, int w) {
  if (e->pp < 2) return STRATA_OK;
  int nv = par_gpt_num_views(e->model), rc;
  for (int i = 0; i < nv; i++)
    if (state_view_is_copy(e, i))
      for (int k = 0; k < w; k++) vsq[(size_t)i * w + k] = 0;
  if ((rc = comm_allreduce(e->ppc, vsq, vsq, (size_t)nv * w, COMM_F64, COMM_SUM))) return pfail(e, e->ppc, rc);
  return STRATA_OK;
}

int pipe_forward_only(par_engine_t *e, const int32_t *in, const int32_t *tg, float *loss, int *failed) {
  int p = e->pp, v = e->interleave, P = p * v, B = e->layout.microbatch, rc;
  size_t n;
  *loss = NAN;
  for (int c = 0; c < v; c++) {
    int vs = c * p + e->stage, prev = (vs + P - 1) % p, next = (vs + 1) % p;
    e->events = 0;
    if (vs > 0) {
      void *buf = *failed ? NULL : par_gpt_stage_buffer(e->model, 0, c, PAR_GPT_IN, B, e->seq, &n);
      if (!*failed && !buf) *failed = model_fail(e, STRATA_ENOMEM, "pipeline input");
      if ((rc = comm_recv(e->ppc, buf ? buf : e->dry, e->boundary, e->bcdt, prev, 2 * P + vs - 1)))
        return pfail(e, e->ppc, rc);
    }
    if (!*failed && (rc = par_gpt_stage_forward(e->model, 0, c, in, tg, B, e->seq, loss)))
      *failed = e->hook_rc ? rc : model_fail(e, rc, "validation");
    if (e->hook_rc) return e->hook_rc;
    if (vs < P - 1) {
      void *out = *failed ? NULL : par_gpt_stage_buffer(e->model, 0, c, PAR_GPT_OUT, B, e->seq, &n);
      if ((rc = comm_send(e->ppc, out ? out : e->dry, e->boundary, e->bcdt, next, 2 * P + vs)))
        return pfail(e, e->ppc, rc);
    }
  }
  return STRATA_OK;
}
