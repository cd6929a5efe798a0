/* Pipeline schedules (strata/par_pipe.h) against the published formulas:
 * the simulated bubble of GPipe and 1F1B is (p - 1) / (m + p - 1) of the
 * step for any forward/backward cost ratio (Huang et al. 2019; Narayanan et
 * al., arXiv 2104.04473, sec. 2.2.1), the interleaved schedule's
 * (p - 1) / (v m + p - 1) (sec. 2.2.2: the bubble divided by v); the first
 * stage holds m microbatches' activations under GPipe, min(p, m) under
 * 1F1B and p (1 + (p - 1) / (p v)) stage-microbatches interleaved (Korthikanti
 * et al., arXiv 2205.05198, sec. 4.2.3); every operation appears once; the
 * printed schedule of a small case is the one in the papers' figures. Exact
 * arithmetic on small integers: compared to 1e-12. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/par_pipe.h>

static void check(par_schedule_t kind, int p, int m, int v, double tb) {
  par_pipe_t *pp = NULL;
  char err[256];
  cr_assert_eq(par_pipe_create(&pp, kind, p, m, v, err, sizeof err), 0, "%s", err);
  /* every (microbatch, chunk) forward and backward once per stage */
  for (int s = 0; s < p; s++) {
    const par_pipe_op_t *ops;
    int n = par_pipe_ops(pp, s, &ops);
    cr_assert_eq(n, 2 * m * v);
    int *seen = calloc((size_t)(2 * m * v), sizeof *seen);
    for (int i = 0; i < n; i++) seen[(ops[i].kind * m + ops[i].microbatch) * v + ops[i].chunk]++;
    for (int i = 0; i < n; i++) cr_expect_eq(seen[i], 1, "kind %d p %d m %d v %d stage %d: op %d seen %d times", kind, p, m, v, s, i, seen[i]);
    free(seen);
  }
  par_pipe_stats_t st;
  cr_assert_eq(par_pipe_simulate(pp, 1.0, tb, &st), 0, "kind %d p %d m %d v %d deadlocks", kind, p, m, v);
  double want = kind == PAR_SCHED_INTERLEAVED ? (p - 1.0) / (v * m + p - 1.0) : (p - 1.0) / (m + p - 1.0);
  cr_expect(fabs(st.bubble - want) < 1e-12, "kind %d p %d m %d v %d tb %g: bubble %.6f, formula %.6f", kind, p, m, v,
            tb, st.bubble, want);
  double first = kind == PAR_SCHED_GPIPE  ? m
                 : kind == PAR_SCHED_1F1B ? (p < m ? p : m)
                                          : p * (1.0 + (p - 1.0) / (p * v));
  cr_expect(fabs(st.max_inflight[0] / (double)v - first) < 1e-12,
            "kind %d p %d m %d v %d: stage 0 holds %g microbatches, formula %g", kind, p, m, v,
            st.max_inflight[0] / (double)v, first);
  par_pipe_destroy(pp);
}

Test(pipe, gpipe_and_1f1b_bubbles) {
  int ps[] = {1, 2, 4}, ms[] = {1, 4, 8};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (double tb = 1; tb <= 2; tb++) {
        check(PAR_SCHED_GPIPE, ps[i], ms[j], 1, tb);
        check(PAR_SCHED_1F1B, ps[i], ms[j], 1, tb);
      }
}

Test(pipe, interleaved_bubble) {
  check(PAR_SCHED_INTERLEAVED, 2, 4, 2, 2);
  check(PAR_SCHED_INTERLEAVED, 4, 8, 2, 2);
  check(PAR_SCHED_INTERLEAVED, 4, 8, 3, 1);
  check(PAR_SCHED_INTERLEAVED, 2, 8, 4, 2);
}

Test(pipe, printed_1f1b) {
  par_pipe_t *pp = NULL;
  cr_assert_eq(par_pipe_create(&pp, PAR_SCHED_1F1B, 3, 4, 1, NULL, 0), 0);
  char buf[512] = "";
  FILE *f = fmemopen(buf, sizeof buf, "w");
  par_pipe_print(pp, f);
  fclose(f);
  cr_expect_str_eq(buf, "stage 0: F0 F1 F2 B0 F3 B1 B2 B3\n"
                        "stage 1: F0 F1 B0 F2 B1 F3 B2 B3\n"
                        "stage 2: F0 B0 F1 B1 F2 B2 F3 B3\n");
  par_pipe_destroy(pp);
}

Test(pipe, bad_settings) {
  par_pipe_t *pp = NULL;
  char err[256];
  cr_expect_eq(par_pipe_create(&pp, PAR_SCHED_INTERLEAVED, 4, 6, 2, err, sizeof err), STRATA_EINVAL);
  cr_expect(strstr(err, "microbatches (6) a multiple of the stages (4)"), "%s", err);
  cr_expect_eq(par_pipe_create(&pp, PAR_SCHED_1F1B, 4, 8, 2, err, sizeof err), STRATA_EINVAL);
  cr_expect(strstr(err, "an interleave of 2 needs the interleaved schedule"), "%s", err);
  cr_expect_eq(par_pipe_create(&pp, PAR_SCHED_GPIPE, 0, 8, 1, err, sizeof err), STRATA_EINVAL);
  cr_expect(pp == NULL);
}

/* The rounds (par_pipe_rounds), the order in which the runtime posts the
 * step's messages on the CPU and on devices; exact bookkeeping on small
 * integers, checked for every schedule over p 1..6, v 2..4, m up to 4 p:
 *  - every operation runs in exactly one round, a stage's in its schedule's
 *    order, and every input it needs was posted in an earlier round;
 *  - every message is posted once by its sender and once by its receiver,
 *    both in the round its producer runs, before its consumer's round;
 *  - for every ordered pair of stages, the sequence of the sender's sends to
 *    the receiver equals the receiver's sequence of receives from it (what
 *    NCCL, which ignores tags, pairs in call order);
 *  - NCCL's worst case, every send waiting for its receive and each stage's
 *    groups running one after another: replaying the groups with the
 *    runtime's waits (an operation waits for its input, and for the send
 *    that last read a buffer it rewrites: the activation slots as the
 *    runtime assigns them) completes, and no such wait is on a message
 *    computed but not yet posted. The order the schedule alone gives
 *    (posting each message when its operation runs) deadlocks under the
 *    same replay for the interleaved schedule, which is why rounds exist:
 *    checked for p 2, m 4, v 2. */
typedef struct {
  int kind, mb, from;
} msg_id_t;

#define MAXQ 4096
/* A stage's posted point-to-point operations in order, for the replay. */
typedef struct {
  int n;
  msg_id_t id[MAXQ];
  int send[MAXQ], peer[MAXQ], group[MAXQ];
} queue_t;

static int same_id(msg_id_t a, msg_id_t b) { return a.kind == b.kind && a.mb == b.mb && a.from == b.from; }

/* Replays stage groups under rendezvous semantics: a group completes when
 * every operation's partner (the same-index operation of the peer in the
 * other direction) sits in a group that has started. Returns 1 when all
 * complete. started[s] = groups started on s. */
static int replay(queue_t *q, int p, int *ngroups) {
  int started[64] = {0}, done = 0;
  for (int s = 0; s < p; s++) started[s] = ngroups[s] > 0 ? 1 : 0;
  for (int progress = 1; progress;) {
    progress = 0;
    for (int s = 0; s < p; s++) {
      int g = started[s] - 1; /* the running group */
      if (g < 0 || g >= ngroups[s]) continue;
      int ok = 1;
      for (int i = 0; i < q[s].n && ok; i++) {
        if (q[s].group[i] != g) continue;
        /* partner: the k-th op of s towards peer in this direction <-> the k-th of peer's opposite */
        int k = 0, peer = q[s].peer[i], dir = q[s].send[i];
        for (int j = 0; j < i; j++) k += q[s].peer[j] == peer && q[s].send[j] == dir;
        int found = 0;
        for (int j = 0; j < q[peer].n; j++)
          if (q[peer].peer[j] == s && q[peer].send[j] == !dir && k-- == 0) {
            found = 1;
            cr_assert(same_id(q[s].id[i], q[peer].id[j]), "stage %d op %d pairs with a different message", s, i);
            ok = q[peer].group[j] < started[peer];
            break;
          }
        if (!found) ok = 0;
      }
      if (ok) started[s]++, progress = 1;
    }
  }
  done = 1;
  for (int s = 0; s < p; s++) done &= started[s] > ngroups[s] || ngroups[s] == 0;
  return done;
}

static void check_rounds(par_schedule_t kind, int p, int m, int v) {
  par_pipe_t *pp = NULL;
  char err[256];
  cr_assert_eq(par_pipe_create(&pp, kind, p, m, v, err, sizeof err), 0, "%s", err);
  int P = p * v, nops = 2 * m * v, nr = -1;
  /* RAN: the round of each (kind, virtual stage, microbatch) operation */
  int *ran = malloc(sizeof(int) * 2 * (size_t)P * m);
  for (int i = 0; i < 2 * P * m; i++) ran[i] = -1;
#define RAN(k, vs, mb) ran[((k) * P + (vs)) * m + (mb)]
  for (int s = 0; s < p; s++) {
    const par_pipe_op_t *ops;
    const par_pipe_round_t *R;
    par_pipe_ops(pp, s, &ops);
    int n = par_pipe_rounds(pp, s, &R), last = -1;
    cr_assert(nr < 0 || n == nr, "stages disagree on the number of rounds");
    nr = n;
    for (int r = 0; r < n; r++)
      if (R[r].op >= 0) {
        cr_assert_eq(R[r].op, last + 1, "kind %d p %d m %d v %d stage %d: op %d out of order", kind, p, m, v, s, R[r].op);
        last = R[r].op;
        RAN(ops[last].kind, ops[last].chunk * p + s, ops[last].microbatch) = r;
      }
    cr_assert_eq(last, nops - 1, "stage %d: %d of %d ops in rounds", s, last + 1, nops);
  }
  /* inputs from earlier rounds; messages at both ends in one round, after the producer */
  queue_t *q = calloc((size_t)p, sizeof *q);
  int ngroups[64] = {0}, nmsg = 0;
  for (int s = 0; s < p; s++) {
    const par_pipe_round_t *R;
    par_pipe_rounds(pp, s, &R);
    for (int r = 0; r < nr; r++) {
      for (int i = 0; i < R[r].nmsgs; i++) {
        const par_pipe_msg_t *g = &R[r].msgs[i];
        int to = g->kind == PAR_PIPE_FORWARD ? g->from + 1 : g->from - 1;
        cr_assert(to >= 0 && to < P, "message from %d of kind %d leaves the pipeline", g->from, g->kind);
        cr_assert_eq(g->send ? g->from % p : to % p, s, "a message of another stage");
        cr_assert_eq(g->peer, g->send ? to % p : g->from % p);
        cr_assert_eq(RAN(g->kind, g->from, g->microbatch), r, "posted in another round than its producer's");
        cr_assert(RAN(g->kind, to, g->microbatch) > r, "posted after its consumer ran");
        cr_assert_lt(q[s].n, MAXQ);
        int j = q[s].n++;
        q[s].id[j] = (msg_id_t){g->kind, g->microbatch, g->from};
        q[s].send[j] = g->send, q[s].peer[j] = g->peer, q[s].group[j] = ngroups[s];
        nmsg += g->send;
      }
      if (R[r].nmsgs) ngroups[s]++;
    }
  }
  cr_expect_eq(nmsg, 2 * (P - 1) * m, "kind %d p %d m %d v %d: %d messages sent", kind, p, m, v, nmsg);
  /* send sequence a -> b equals receive sequence of b from a */
  for (int a = 0; a < p; a++)
    for (int b = 0; b < p; b++) {
      int i = 0, j = 0;
      for (;;) {
        while (i < q[a].n && !(q[a].send[i] && q[a].peer[i] == b)) i++;
        while (j < q[b].n && !(!q[b].send[j] && q[b].peer[j] == a)) j++;
        if (i == q[a].n || j == q[b].n) break;
        cr_assert(same_id(q[a].id[i], q[b].id[j]), "kind %d p %d m %d v %d: %d -> %d: send %d is not receive %d",
                  kind, p, m, v, a, b, i, j);
        i++, j++;
      }
      cr_assert(i == q[a].n && j == q[b].n, "kind %d p %d m %d v %d: %d -> %d: counts differ", kind, p, m, v, a, b);
    }
  cr_expect(replay(q, p, ngroups), "kind %d p %d m %d v %d: the rounds' groups deadlock", kind, p, m, v);
  /* the runtime's waits on its send buffers (slots as it assigns them) are on posted messages */
  for (int s = 0; s < p; s++) {
    const par_pipe_op_t *ops;
    par_pipe_ops(pp, s, &ops);
    int slot_of[256], busy[256] = {0}, posted_f[256], posted_b[256];
    for (int i = 0; i < 256; i++) posted_f[i] = posted_b[i] = -1;
    for (int i = 0; i < nops; i++) {
      const par_pipe_op_t *o = &ops[i];
      int c = o->chunk, mb = o->microbatch, vs = c * p + s, r = RAN(o->kind, vs, mb);
      if (o->kind == PAR_PIPE_FORWARD) {
        if (c == 0)
          for (int k = 0; k < 256; k++)
            if (!busy[k]) {
              busy[k] = 1, slot_of[mb] = k;
              break;
            }
        if (vs < P - 1) posted_f[slot_of[mb] * v + c] = r;
        continue;
      }
      int k = slot_of[mb] * v + c;
      cr_assert(posted_f[k] < r, "stage %d: waits in round %d for an output posted in %d", s, r, posted_f[k]);
      if (vs > 0) {
        cr_assert(posted_b[k] < r, "stage %d: waits in round %d for a gradient posted in %d", s, r, posted_b[k]);
        posted_b[k] = r;
      }
      if (c == 0) busy[slot_of[mb]] = 0;
    }
  }
#undef RAN
  free(q), free(ran);
  par_pipe_destroy(pp);
}

Test(pipe, rounds_pair_every_message) {
  for (int p = 1; p <= 6; p++)
    for (int m = 1; m <= 4 * p; m++) {
      check_rounds(PAR_SCHED_GPIPE, p, m, 1);
      check_rounds(PAR_SCHED_1F1B, p, m, 1);
      for (int v = 2; v <= 4 && p > 1; v++)
        if (m % p == 0) check_rounds(PAR_SCHED_INTERLEAVED, p, m, v);
    }
}

/* Why: the messages posted as each operation runs (the sends queued until the
 * stage next blocks on a receive, as libcomm groups them) deadlock the
 * interleaved schedule under the same replay. */
Test(pipe, interleaved_in_op_order_deadlocks) {
  par_pipe_t *pp = NULL;
  int p = 2, m = 4, v = 2, P = p * v;
  cr_assert_eq(par_pipe_create(&pp, PAR_SCHED_INTERLEAVED, p, m, v, NULL, 0), 0);
  queue_t *q = calloc((size_t)p, sizeof *q);
  int ngroups[64] = {0};
  for (int s = 0; s < p; s++) {
    const par_pipe_op_t *ops;
    int n = par_pipe_ops(pp, s, &ops);
    for (int i = 0; i < n; i++) {
      int c = ops[i].chunk, mb = ops[i].microbatch, vs = c * p + s, fwd = ops[i].kind == PAR_PIPE_FORWARD;
      int in = fwd ? (vs > 0 ? vs - 1 : -1) : (vs < P - 1 ? vs + 1 : -1), out = fwd ? (vs < P - 1 ? vs : -1) : (vs > 0 ? vs : -1);
      int j;
      if (in >= 0) { /* a blocking receive: the queued sends and it form a group */
        j = q[s].n++;
        q[s].id[j] = (msg_id_t){ops[i].kind, mb, in}, q[s].send[j] = 0, q[s].peer[j] = in % p, q[s].group[j] = ngroups[s]++;
      }
      if (out >= 0) {
        j = q[s].n++;
        q[s].id[j] = (msg_id_t){ops[i].kind, mb, out}, q[s].send[j] = 1;
        q[s].peer[j] = (fwd ? out + 1 : out - 1) % p, q[s].group[j] = ngroups[s];
      }
    }
    if (q[s].n && q[s].group[q[s].n - 1] == ngroups[s]) ngroups[s]++;
  }
  cr_expect(!replay(q, p, ngroups), "the op-order posting of interleaved p 2 m 4 v 2 should deadlock");
  free(q);
  par_pipe_destroy(pp);
}
