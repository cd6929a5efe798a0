/* Pipeline schedules as data (strata/par_pipe.h): GPipe, 1F1B and
 * Megatron's interleaved 1F1B, built as each device's ordered operations,
 * and a simulation that times them under the dependencies of a pipeline. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/par_pipe.h>

struct par_pipe {
  par_schedule_t kind;
  int p, m, v;
  par_pipe_op_t *ops;       /* p x 2 m v */
  int nrounds;
  par_pipe_round_t *rounds; /* p x nrounds */
  par_pipe_msg_t *msgs;     /* every stage's, round after round */
};

static int fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && n) vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return STRATA_EINVAL;
}

/* Megatron's interleaved order: the k-th forward (or backward) of a device
 * takes microbatch group k / (p v), chunk (k mod p v) / p (reversed in
 * backward), microbatch group p + k mod p. */
static par_pipe_op_t interleaved_op(int k, int kind, int p, int v) {
  int in_group = k % (p * v), chunk = in_group / p;
  if (kind == PAR_PIPE_BACKWARD) chunk = v - 1 - chunk;
  return (par_pipe_op_t){.kind = kind, .microbatch = (k / (p * v)) * p + k % p, .chunk = chunk};
}

static void build_stage(par_pipe_t *pp, int s, par_pipe_op_t *o) {
  int p = pp->p, m = pp->m, v = pp->v, n = 0;
  if (pp->kind == PAR_SCHED_GPIPE) {
    for (int i = 0; i < m; i++) o[n++] = (par_pipe_op_t){PAR_PIPE_FORWARD, i, 0};
    for (int i = 0; i < m; i++) o[n++] = (par_pipe_op_t){PAR_PIPE_BACKWARD, i, 0};
    return;
  }
  int total = m * v, warm;
  if (pp->kind == PAR_SCHED_1F1B) warm = p - s - 1;
  else warm = (p - s - 1) * 2 + (v - 1) * p;
  if (warm > total) warm = total;
  int f = 0, b = 0;
#define FWD(k) (pp->kind == PAR_SCHED_1F1B ? (par_pipe_op_t){PAR_PIPE_FORWARD, (k), 0} : interleaved_op((k), PAR_PIPE_FORWARD, p, v))
#define BWD(k) (pp->kind == PAR_SCHED_1F1B ? (par_pipe_op_t){PAR_PIPE_BACKWARD, (k), 0} : interleaved_op((k), PAR_PIPE_BACKWARD, p, v))
  for (; f < warm; f++) o[n++] = FWD(f);
  for (; f < total; f++, b++) { /* steady state: one forward, one backward */
    o[n++] = FWD(f);
    o[n++] = BWD(b);
  }
  for (; b < total; b++) o[n++] = BWD(b);
#undef FWD
#undef BWD
}

/* The lock-step rounds of par_pipe_rounds (why: strata/par_pipe.h). */
static int build_rounds(par_pipe_t *pp) {
  int p = pp->p, m = pp->m, v = pp->v, P = p * v, nops = 2 * m * v, rc = STRATA_OK;
  size_t nm = (size_t)P * m;
  int *ran = malloc(2 * nm * sizeof *ran), *next = calloc((size_t)p, sizeof *next), *go = calloc((size_t)p, sizeof *go);
  if (!ran || !next || !go) {
    rc = STRATA_ENOMEM;
    goto done;
  }
  /* RAN: the round of (kind, virtual stage, microbatch)'s operation, -1 before */
#define RAN(kind, vs, mb) ran[((size_t)(kind) * P + (size_t)(vs)) * m + (size_t)(mb)]
  for (size_t i = 0; i < 2 * nm; i++) ran[i] = -1;
  int t = 0, left = p * nops;
  while (left > 0) {
    int any = 0;
    for (int s = 0; s < p; s++) {
      go[s] = 0;
      if (next[s] == nops) continue;
      const par_pipe_op_t *o = pp->ops + (size_t)s * nops + next[s];
      int vs = o->chunk * p + s, mb = o->microbatch, in;
      /* its input came from an operation of an earlier round (the last virtual
       * stage's backward needs only its own forward, an earlier op here) */
      if (o->kind == PAR_PIPE_FORWARD) go[s] = vs == 0 || ((in = RAN(PAR_PIPE_FORWARD, vs - 1, mb)) >= 0 && in < t);
      else if (vs == P - 1) go[s] = RAN(PAR_PIPE_FORWARD, vs, mb) >= 0;
      else go[s] = (in = RAN(PAR_PIPE_BACKWARD, vs + 1, mb)) >= 0 && in < t;
    }
    for (int s = 0; s < p; s++)
      if (go[s]) {
        const par_pipe_op_t *o = pp->ops + (size_t)s * nops + next[s];
        RAN(o->kind, o->chunk * p + s, o->microbatch) = t;
        next[s]++, left--, any = 1;
      }
    if (!any) {
      rc = STRATA_EINVAL; /* the schedule deadlocks */
      goto done;
    }
    t++;
  }
  pp->nrounds = t;
  size_t nmsg = 2 * (size_t)2 * (size_t)(P - 1) * m; /* each message once at either end */
  pp->rounds = calloc((size_t)p * t, sizeof *pp->rounds);
  pp->msgs = malloc((nmsg ? nmsg : 1) * sizeof *pp->msgs);
  if (!pp->rounds || !pp->msgs) {
    rc = STRATA_ENOMEM;
    goto done;
  }
  for (int s = 0; s < p; s++) {
    par_pipe_round_t *R = pp->rounds + (size_t)s * t;
    for (int r = 0; r < t; r++) R[r].op = -1;
    for (int i = 0; i < nops; i++) {
      const par_pipe_op_t *o = pp->ops + (size_t)s * nops + i;
      R[RAN(o->kind, o->chunk * p + s, o->microbatch)].op = i;
    }
  }
  /* A message's round: its producer's. Visited in the order (kind,
   * microbatch, sender), each round's list comes out in it. */
  for (int pass = 0; pass < 2; pass++) {
    size_t at = 0;
    if (pass == 1)
      for (int i = 0; i < p * t; i++) {
        pp->rounds[i].msgs = pp->msgs + at, at += (size_t)pp->rounds[i].nmsgs;
        pp->rounds[i].nmsgs = 0;
      }
    for (int kind = 0; kind < 2; kind++)
      for (int mb = 0; mb < m; mb++)
        for (int from = 0; from < P; from++) {
          int to = kind == PAR_PIPE_FORWARD ? from + 1 : from - 1;
          if (to < 0 || to >= P) continue;
          int r = RAN(kind, from, mb), ends[2] = {from % p, to % p};
          for (int e = 0; e < 2; e++) {
            par_pipe_round_t *R = pp->rounds + (size_t)ends[e] * t + r;
            if (pass == 1)
              pp->msgs[(R->msgs - pp->msgs) + R->nmsgs] = (par_pipe_msg_t){.kind = kind, .microbatch = mb, .from = from, .send = e == 0, .peer = ends[!e]};
            R->nmsgs++;
          }
        }
  }
#undef RAN
done:
  free(ran), free(next), free(go);
  return rc;
}

int par_pipe_create(par_pipe_t **out, par_schedule_t kind, int stages, int microbatches, int interleave, char *err,
                    size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  if (kind < PAR_SCHED_GPIPE || kind > PAR_SCHED_INTERLEAVED)
    return fail(err, errlen, "pipeline: unknown schedule %d", (int)kind);
  if (stages < 1 || microbatches < 1)
    return fail(err, errlen, "pipeline: %d stages and %d microbatches must be >= 1", stages, microbatches);
  if (kind == PAR_SCHED_INTERLEAVED && (interleave < 2 || microbatches % stages))
    return fail(err, errlen,
                "pipeline: the interleaved schedule needs an interleave >= 2 (got %d) and microbatches (%d) a "
                "multiple of the stages (%d)",
                interleave, microbatches, stages);
  if (kind != PAR_SCHED_INTERLEAVED && interleave != 1)
    return fail(err, errlen, "pipeline: an interleave of %d needs the interleaved schedule", interleave);
  par_pipe_t *pp = calloc(1, sizeof *pp);
  int v = kind == PAR_SCHED_INTERLEAVED ? interleave : 1;
  if (!pp || !(pp->ops = calloc((size_t)stages * 2 * (size_t)microbatches * (size_t)v, sizeof *pp->ops))) {
    free(pp);
    if (err && errlen) snprintf(err, errlen, "pipeline: out of memory for %d stages x %d microbatches", stages,
                                microbatches);
    return STRATA_ENOMEM;
  }
  pp->kind = kind, pp->p = stages, pp->m = microbatches, pp->v = v;
  for (int s = 0; s < stages; s++) build_stage(pp, s, pp->ops + (size_t)s * 2 * microbatches * v);
  int rc = build_rounds(pp);
  if (rc != STRATA_OK) {
    if (err && errlen)
      snprintf(err, errlen, rc == STRATA_ENOMEM ? "pipeline: out of memory for the rounds of %d stages x %d microbatches"
                                                : "pipeline: the schedule of %d stages x %d microbatches deadlocks",
               stages, microbatches);
    par_pipe_destroy(pp);
    return rc;
  }
  *out = pp;
  return STRATA_OK;
}

void par_pipe_destroy(par_pipe_t *p) {
  if (!p) return;
  free(p->rounds), free(p->msgs);
  free(p->ops);
  free(p);
}

int par_pipe_ops(const par_pipe_t *p, int stage, const par_pipe_op_t **ops) {
  if (!p || stage < 0 || stage >= p->p) return -1;
  if (ops) *ops = p->ops + (size_t)stage * 2 * p->m * p->v;
  return 2 * p->m * p->v;
}

int par_pipe_rounds(const par_pipe_t *p, int stage, const par_pipe_round_t **rounds) {
  if (!p || stage < 0 || stage >= p->p) return -1;
  if (rounds) *rounds = p->rounds + (size_t)stage * p->nrounds;
  return p->nrounds;
}

int par_pipe_simulate(const par_pipe_t *pp, double tf, double tb, par_pipe_stats_t *st) {
  if (!pp || !st || !(tf > 0) || !(tb > 0)) return STRATA_EINVAL;
  memset(st, 0, sizeof *st);
  int p = pp->p, m = pp->m, v = pp->v, nops = 2 * m * v, P = p * v;
  /* finish times of each (virtual stage, microbatch) forward and backward; -1: not yet */
  double *fin = malloc(sizeof(double) * 2 * (size_t)P * m), *free_at = calloc((size_t)p, sizeof(double));
  int *next = calloc((size_t)p, sizeof(int)), *held = calloc((size_t)p, sizeof(int));
  if (!fin || !free_at || !next || !held) {
    free(fin), free(free_at), free(next), free(held);
    return STRATA_ENOMEM;
  }
  for (size_t i = 0; i < 2 * (size_t)P * m; i++) fin[i] = -1;
#define FIN(kind, vs, mb) fin[((size_t)(kind) * P + (size_t)(vs)) * m + (size_t)(mb)]
  double busy = 0;
  int left = p * nops, rc = STRATA_OK;
  while (left > 0) {
    int progress = 0;
    for (int s = 0; s < p; s++) {
      while (next[s] < nops) {
        const par_pipe_op_t *o = pp->ops + (size_t)s * nops + next[s];
        int vs = o->chunk * p + s;
        double ready;
        if (o->kind == PAR_PIPE_FORWARD) ready = vs == 0 ? 0 : FIN(PAR_PIPE_FORWARD, vs - 1, o->microbatch);
        else ready = vs == P - 1 ? FIN(PAR_PIPE_FORWARD, vs, o->microbatch) : FIN(PAR_PIPE_BACKWARD, vs + 1, o->microbatch);
        if (ready < 0) break; /* its input has not been computed yet */
        double t = (o->kind == PAR_PIPE_FORWARD ? tf : tb) / v, start = fmax(ready, free_at[s]);
        FIN(o->kind, vs, o->microbatch) = free_at[s] = start + t;
        busy += t;
        held[s] += o->kind == PAR_PIPE_FORWARD ? 1 : -1;
        if (s < 64 && held[s] > st->max_inflight[s]) st->max_inflight[s] = held[s];
        next[s]++, left--, progress = 1;
      }
    }
    if (!progress) {
      rc = STRATA_EINVAL; /* every device waits on another: the schedule deadlocks */
      break;
    }
  }
#undef FIN
  for (int s = 0; s < p; s++) st->makespan = fmax(st->makespan, free_at[s]);
  st->bubble = rc == STRATA_OK && st->makespan > 0 ? 1.0 - busy / (p * st->makespan) : NAN;
  free(fin), free(free_at), free(next), free(held);
  return rc;
}

int par_pipe_print(const par_pipe_t *pp, FILE *f) {
  if (!pp || !f) return STRATA_EINVAL;
  int nops = 2 * pp->m * pp->v;
  for (int s = 0; s < pp->p; s++) {
    fprintf(f, "stage %d:", s);
    for (int i = 0; i < nops; i++) {
      const par_pipe_op_t *o = pp->ops + (size_t)s * nops + i;
      if (pp->v > 1) fprintf(f, " %c%d.%d", o->kind == PAR_PIPE_FORWARD ? 'F' : 'B', o->microbatch, o->chunk);
      else fprintf(f, " %c%d", o->kind == PAR_PIPE_FORWARD ? 'F' : 'B', o->microbatch);
    }
    fputc('\n', f);
  }
  return STRATA_OK;
}
