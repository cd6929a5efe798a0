/* Pipeline parallelism in the engine (layout.pp > 1): each rank is one
 * stage of a pipeline group (the ranks with its data and tensor
 * coordinates) and runs its part of the schedule (strata/par_pipe.h, built
 * once, only followed here): the forward or backward of one microbatch
 * through one of its chunks, op after op.
 *
 * Messages. A chunk that is not the first virtual stage receives its input
 * activations from the previous one, and one that is not the last sends
 * its output to the next; in backward the gradients go the other way. Each
 * is one message of the microbatch's B T h floats (under sequence
 * parallelism this rank's B T h / t), with libcomm's send and receive:
 * sends are non-blocking and only waited for before their buffer is used
 * again, receives block until their message is in. Every wait is then on a
 * message the schedule's dependencies produce, which par_pipe_simulate
 * checks cannot deadlock. A boundary's messages carry one tag per
 * direction; each direction's microbatches pass in order on both sides, so
 * MPI's ordering pairs them.
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
  if ((rc = par_gpt_set_slots(e->model, e->nslots))) return model_fail(e, rc, "pipeline");
  size_t bt = (size_t)e->layout.microbatch * (size_t)e->seq, ns = (size_t)e->nslots * (size_t)v;
  e->boundary = bt * (size_t)e->mc.hidden / (e->layout.seq_parallel ? (size_t)e->tp_size : 1);
  if (!(e->slot_of = malloc(((size_t)m + (size_t)e->nslots) * sizeof *e->slot_of)) ||
      !(e->in_all = malloc((size_t)m * bt * sizeof *e->in_all)) ||
      !(e->tg_all = malloc((size_t)m * bt * sizeof *e->tg_all)) || !(e->gsend = calloc(ns, sizeof *e->gsend)) ||
      !(e->fsend = calloc(ns, sizeof *e->fsend)) || !(e->bsend = calloc(ns, sizeof *e->bsend)))
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for a pipeline of %d microbatches", m);
  /* A failed rank's stand-in for the boundary buffers lives where they do:
   * on a device its messages must go through NCCL as its peers' do. */
  if (e->device >= 0) {
    tensor_t t;
    int64_t nb = (int64_t)e->boundary;
    if ((rc = tensor_alloc(e->tc, &t, TENSOR_F32, e->device, 1, &nb)))
      return engine_fail(e, 0, rc, "pipeline: %s", tensor_last_error(e->tc));
    e->dry = t.data;
  } else if (!(e->dry = calloc(e->boundary, sizeof *e->dry))) {
    return engine_fail(e, 0, STRATA_ENOMEM, "out of memory for a pipeline of %d microbatches", m);
  }
  return STRATA_OK;
}

static void wait_sends(par_engine_t *e) {
  size_t ns = (size_t)e->nslots * (size_t)e->interleave;
  for (size_t i = 0; e->fsend && i < ns; i++) comm_wait(&e->fsend[i]), comm_wait(&e->bsend[i]);
}

void pipe_destroy(par_engine_t *e) {
  if (!e->pipe) return;
  wait_sends(e);
  for (size_t i = 0; e->gsend && i < (size_t)e->nslots * (size_t)e->interleave; i++)
    if (e->gsend[i]) {
      tensor_t t = tensor_view1(e->gsend[i], TENSOR_F32, e->device, (int64_t)e->boundary);
      t.owned = 1; /* (tensor_alloc's: a view would be left alone) */
      tensor_free(e->tc, &t);
    }
  par_pipe_destroy(e->pipe);
  if (e->dry && e->device >= 0) {
    tensor_t t = tensor_view1(e->dry, TENSOR_F32, e->device, (int64_t)e->boundary);
    t.owned = 1;
    tensor_free(e->tc, &t);
  } else {
    free(e->dry);
  }
  e->dry = NULL;
  free(e->slot_of), free(e->in_all), free(e->tg_all), free(e->gsend), free(e->fsend), free(e->bsend);
  e->pipe = NULL;
}

/* Blocks until the message from stage `peer` is in buf. */
static int recv(par_engine_t *e, float *buf, int peer, int tag) {
  int rc = comm_recv(e->ppc, buf, e->boundary, COMM_F32, peer, tag);
  return rc ? pfail(e, e->ppc, rc) : STRATA_OK;
}

/* The send buffer of the input gradient of (slot, chunk), allocated on
 * first use (counted by the accountant with the activations). */
static float *grad_buffer(par_engine_t *e, size_t i) {
  if (!e->gsend[i]) {
    tensor_t t;
    int64_t n = (int64_t)e->boundary;
    if (tensor_alloc(e->tc, &t, TENSOR_F32, e->device, 1, &n) == STRATA_OK) e->gsend[i] = t.data;
  }
  return e->gsend[i];
}

static void delay(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  if (s > 0) nanosleep(&ts, NULL);
}

static int take_slot(par_engine_t *e, int mb) {
  int *busy = e->slot_of + e->accum;
  for (int s = 0; s < e->nslots; s++)
    if (!busy[s]) {
      busy[s] = 1;
      return e->slot_of[mb] = s;
    }
  return -1; /* cannot happen: the schedule has at most nslots in flight */
}

/* One operation of the schedule. *failed: this rank failed earlier in the
 * step (it passes the messages on without computing); set here when the
 * model fails. Returns an error only when the messages failed. */
static int run_op(par_engine_t *e, const par_pipe_op_t *o, int *failed, double *lsum) {
  int p = e->pp, v = e->interleave, P = p * v, B = e->layout.microbatch, rc, first, count, embeds, head;
  int c = o->chunk, mb = o->microbatch, vs = c * p + e->stage, prev = (vs + P - 1) % p, next = (vs + 1) % p;
  size_t bt = (size_t)B * (size_t)e->seq, n;
  par_gpt_stage_chunk(e->model, c, &first, &count, &embeds, &head);
  e->microbatch = mb;
  e->reducing = o->kind == PAR_PIPE_BACKWARD && mb == e->accum - 1; /* each region's last microbatch */
  e->events = 0;
  if (o->kind == PAR_PIPE_FORWARD) {
    int slot = c == 0 ? take_slot(e, mb) : e->slot_of[mb];
    if (vs > 0) {
      float *in = *failed ? NULL : par_gpt_stage_buffer(e->model, slot, c, PAR_GPT_IN, B, e->seq, &n);
      if (!*failed && !in) *failed = model_fail(e, STRATA_ENOMEM, "pipeline input");
      if ((rc = recv(e, in ? in : e->dry, prev, vs - 1))) return rc;
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
    if (vs < P - 1) {
      float *out = *failed ? NULL : par_gpt_stage_buffer(e->model, slot, c, PAR_GPT_OUT, B, e->seq, &n);
      if ((rc = comm_isend(e->ppc, out ? out : e->dry, e->boundary, COMM_F32, next, vs,
                           &e->fsend[(size_t)slot * v + c])))
        return pfail(e, e->ppc, rc);
    }
    return STRATA_OK;
  }
  int slot = e->slot_of[mb];
  size_t k = (size_t)slot * v + c;
  /* the output sent in forward is rewritten by a recomputation: sent first */
  if ((rc = comm_wait(&e->fsend[k]))) return pfail(e, e->ppc, rc);
  if (vs < P - 1) {
    float *d = *failed ? NULL : par_gpt_stage_buffer(e->model, slot, c, PAR_GPT_DOUT, B, e->seq, &n);
    if ((rc = recv(e, d ? d : e->dry, next, P + vs))) return rc;
  }
  double t0 = engine_now();
  delay(2 * e->opts.delay_ops_s / v);
  if (!*failed && (rc = par_gpt_stage_backward(e->model, slot, c)))
    *failed = e->hook_rc ? rc : model_fail(e, rc, "backward");
  e->t_busy += engine_now() - t0;
  if (e->hook_rc) return e->hook_rc;
  /* a failed rank still posts the reductions the others post */
  if (*failed && (rc = state_replay_backward(e, e->events, first, first + count))) return rc;
  if (vs > 0) {
    if ((rc = comm_wait(&e->bsend[k]))) return pfail(e, e->ppc, rc);
    float *g = *failed ? NULL : grad_buffer(e, k), *din = NULL;
    if (!*failed && !g) *failed = engine_fail(e, 0, STRATA_ENOMEM, "out of memory: pipeline gradient buffer");
    if (!*failed) {
      din = par_gpt_stage_buffer(e->model, slot, c, PAR_GPT_DIN, B, e->seq, &n);
      tensor_t d = tensor_view1(g, TENSOR_F32, e->device, (int64_t)e->boundary);
      tensor_t s = tensor_view1(din, TENSOR_F32, e->device, (int64_t)e->boundary);
      if ((rc = tensor_copy(e->tc, &d, &s))) *failed = engine_fail(e, 0, rc, "%s", tensor_last_error(e->tc));
    }
    if ((rc = comm_isend(e->ppc, *failed ? e->dry : g, e->boundary, COMM_F32, prev, P + vs - 1, &e->bsend[k])))
      return pfail(e, e->ppc, rc);
  }
  if (c == 0) e->slot_of[e->accum + slot] = 0, e->slot_of[mb] = -1; /* its last operation here */
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
  const par_pipe_op_t *ops;
  int nops = par_pipe_ops(e->pipe, e->stage, &ops);
  for (int i = 0; i < nops; i++) {
    int was = failed;
    if ((rc = run_op(e, &ops[i], &failed, &lsum))) {
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
      float *buf = *failed ? NULL : par_gpt_stage_buffer(e->model, 0, c, PAR_GPT_IN, B, e->seq, &n);
      if (!*failed && !buf) *failed = model_fail(e, STRATA_ENOMEM, "pipeline input");
      if ((rc = recv(e, buf ? buf : e->dry, prev, 2 * P + vs - 1))) return rc;
    }
    if (!*failed && (rc = par_gpt_stage_forward(e->model, 0, c, in, tg, B, e->seq, loss)))
      *failed = e->hook_rc ? rc : model_fail(e, rc, "validation");
    if (e->hook_rc) return e->hook_rc;
    if (vs < P - 1) {
      float *out = *failed ? NULL : par_gpt_stage_buffer(e->model, 0, c, PAR_GPT_OUT, B, e->seq, &n);
      if ((rc = comm_send(e->ppc, out ? out : e->dry, e->boundary, COMM_F32, next, 2 * P + vs)))
        return pfail(e, e->ppc, rc);
    }
  }
  return STRATA_OK;
}
