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
