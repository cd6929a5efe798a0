/* Planner inputs that fail loudly: every cluster field and planner
 * parameter has a range that its setter enforces and its message states; one
 * default precision (the cluster's mixed precision) for the search and the
 * Lua planner, printed in the plan; the search's precision, schedule and
 * interleave options; its rejections grouped by cause. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/parallel.h>

Test(inputs, every_key_has_a_range) {
  /* a key without a range reads as unknown to the check: none may */
  par_cluster_t c;
  for (int i = 0; par_cluster_preset_name(i); i++) {
    cr_assert_eq(par_cluster_preset(par_cluster_preset_name(i), &c, NULL, 0), 0);
    for (int k = 0; par_cluster_key(k); k++) {
      double v;
      char why[256];
      cr_assert_eq(par_cluster_get(&c, par_cluster_key(k), &v), 0);
      cr_expect_eq(par_cluster_check(par_cluster_key(k), v, why, sizeof why), STRATA_OK, "%s: %s: %s",
                   c.name, par_cluster_key(k), why);
    }
  }
  par_plan_params_t p = PAR_PLAN_PARAMS_DEFAULTS, e;
  par_plan_params_engine(&e);
  for (int k = 0; par_plan_params_key(k); k++) {
    double v;
    char why[256];
    cr_assert_eq(par_plan_params_get(&p, par_plan_params_key(k), &v), 0);
    cr_expect_eq(par_plan_params_check(par_plan_params_key(k), v, why, sizeof why), STRATA_OK, "%s: %s",
                 par_plan_params_key(k), why);
  }
  cr_expect_eq(par_plan_params_validate(&p, NULL, 0), STRATA_OK);
  cr_expect_eq(par_plan_params_validate(&e, NULL, 0), STRATA_OK);
  cr_expect_eq(par_cluster_check("gpu_count", 1, NULL, 0), STRATA_ENOTFOUND);
  cr_expect_eq(par_plan_params_check("gemm_eff", 0.5, NULL, 0), STRATA_ENOTFOUND);
}

/* The message of a value out of range: the key, the value, the range. */
static void expect_range(int cluster, const char *key, double v, const char *want) {
  char why[256] = "";
  int rc = cluster ? par_cluster_check(key, v, why, sizeof why) : par_plan_params_check(key, v, why, sizeof why);
  cr_expect_eq(rc, STRATA_EINVAL, "%s = %g accepted", key, v);
  cr_expect_str_eq(why, want);
}

Test(inputs, out_of_range_values_name_key_value_and_range) {
  expect_range(1, "nodes", -32, "nodes = -32: must be an integer in 1..1000000");
  expect_range(1, "nodes", 0, "nodes = 0: must be an integer in 1..1000000");
  expect_range(1, "nodes", 2.5, "nodes = 2.5: must be an integer in 1..1000000");
  expect_range(1, "nodes", 4294967336.0, "nodes = 4294967336: must be an integer in 1..1000000");
  expect_range(1, "gpus_per_node", 2048, "gpus_per_node = 2048: must be an integer in 1..1024");
  expect_range(1, "intra_bw", -1, "intra_bw = -1: must be > 0");
  expect_range(1, "peak_flops.fp32", 0, "peak_flops.fp32 = 0: must be > 0");
  expect_range(1, "peak_flops.bf16", -1, "peak_flops.bf16 = -1: must be >= 0");
  expect_range(1, "inter_lat", NAN, "inter_lat = nan: must be >= 0 and finite");
  expect_range(0, "gemm_efficiency", -0.5, "gemm_efficiency = -0.5: must be in (0, 1]");
  expect_range(0, "gemm_efficiency", 0, "gemm_efficiency = 0: must be in (0, 1]");
  expect_range(0, "link_efficiency", 1.25, "link_efficiency = 1.25: must be in (0, 1]");
  expect_range(0, "dp_overlap", -0.1, "dp_overlap = -0.1: must be in [0, 1]");
  expect_range(0, "bwd_factor", 0, "bwd_factor = 0: must be > 0");
  expect_range(0, "token_budget", INFINITY, "token_budget = inf: must be > 0 and finite");
  expect_range(0, "shard_align", 1.5, "shard_align = 1.5: must be an integer in 0..1073741824");
  expect_range(0, "act_elem_bytes", -2, "act_elem_bytes = -2: must be >= 0");

  /* the setters refuse the same values and leave the field as it was */
  par_cluster_t c;
  par_cluster_preset("dgx-a100-80gb", &c, NULL, 0);
  cr_expect_eq(par_cluster_set(&c, "nodes", -32), STRATA_EINVAL);
  cr_expect_eq(c.nodes, 1);
  cr_expect_eq(par_cluster_set(&c, "nodes", 4), STRATA_OK);
  cr_expect_eq(c.nodes, 4);
  par_plan_params_t p = PAR_PLAN_PARAMS_DEFAULTS;
  cr_expect_eq(par_plan_params_set(&p, "gemm_efficiency", -0.5), STRATA_EINVAL);
  cr_expect_eq(p.gemm_efficiency, ((par_plan_params_t)PAR_PLAN_PARAMS_DEFAULTS).gemm_efficiency);

  /* whole structs: each field in range, each replicated share at most its whole */
  char why[256];
  p.gemm_efficiency = 0;
  cr_expect_eq(par_plan_params_validate(&p, why, sizeof why), STRATA_EINVAL);
  cr_expect_str_eq(why, "gemm_efficiency = 0: must be in (0, 1]");
  p = (par_plan_params_t)PAR_PLAN_PARAMS_DEFAULTS;
  p.act_token_elems_replicated = 20;
  cr_expect_eq(par_plan_params_validate(&p, why, sizeof why), STRATA_EINVAL);
  cr_expect(strstr(why, "act_token_elems_replicated = 20: must be at most act_token_elems = 16") == why, "%s", why);
}

Test(inputs, one_default_precision) {
  par_cluster_t c;
  par_cluster_preset("dgx-a100-80gb", &c, NULL, 0);
  cr_expect_eq(par_plan_default_precision(&c), PAR_PREC_BF16);
  par_cluster_preset("dgx-h100", &c, NULL, 0);
  cr_expect_eq(par_plan_default_precision(&c), PAR_PREC_BF16);
  par_cluster_preset("dgx1-v100-32gb", &c, NULL, 0); /* no bf16: V100's fp16 tensor cores */
  cr_expect_eq(par_plan_default_precision(&c), PAR_PREC_FP16);
  c.peak_flops[PAR_PREC_FP16] = 0; /* neither 16-bit format */
  cr_expect_eq(par_plan_default_precision(&c), PAR_PREC_FP32);

  /* The search's default is that precision: on V100, every layout fp16 and some fit. */
  par_gpt_config_t m = {.layers = 24, .hidden = 1024, .heads = 16, .seq = 1024, .vocab = 51200};
  par_cluster_preset("dgx1-v100-32gb", &c, NULL, 0);
  par_search_opts_t o = PAR_SEARCH_OPTS_DEFAULTS;
  o.global_batch = 64;
  size_t n = 0;
  cr_assert_eq(par_plan_search(&m, &c, NULL, &o, NULL, 0, &n), 0);
  par_plan_entry_t *e = calloc(n, sizeof *e);
  cr_assert_eq(par_plan_search(&m, &c, NULL, &o, e, n, &n), 0);
  int fit = 0;
  for (size_t i = 0; i < n; i++) {
    cr_expect_eq(e[i].layout.precision, PAR_PREC_FP16);
    fit += e[i].plan.fits;
  }
  cr_expect(fit > 0);
  /* Asking for bf16 there rejects every layout, the otherwise valid ones for
   * one cause that says why, the most common. */
  o.precisions = 1 << PAR_PREC_BF16;
  cr_assert_eq(par_plan_search(&m, &c, NULL, &o, e, n, &n), 0);
  par_plan_cause_t causes[16];
  size_t nc = 0;
  cr_assert_eq(par_plan_search_causes(e, n, causes, 16, &nc), 0);
  cr_assert(nc >= 1 && nc <= 16);
  cr_expect_str_eq(causes[0].cause, "cluster 'dgx#-v#-#gb' has no bf# peak (the GPU lacks it)");
  cr_expect_str_eq(e[causes[0].first].plan.why, "cluster 'dgx1-v100-32gb' has no bf16 peak (the GPU lacks it)");
  size_t sum = 0;
  for (size_t k = 0; k < nc; k++) sum += causes[k].count;
  cr_expect_eq(sum, n, "every layout rejected");
  free(e);

  /* The plan prints the precision it used. */
  par_cluster_preset("dgx-a100-80gb", &c, NULL, 0);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.dp = 8, l.global_batch = 8;
  l.precision = par_plan_default_precision(&c);
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0, "%s", r.why);
  char buf[8192] = {0};
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  par_plan_print(f, &m, &l, &c, &r);
  fclose(f);
  cr_expect(strstr(buf, "\nprecision bf16 mixed: bf16 parameters and gradients, fp32 master weights and Adam moments\n"),
            "%s", buf);
  l.precision = PAR_PREC_FP32;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, NULL, &r), 0, "%s", r.why);
  f = fmemopen(buf, sizeof buf - 1, "w");
  par_plan_print(f, &m, &l, &c, &r);
  fclose(f);
  cr_expect(strstr(buf, "\nprecision fp32: ") != NULL, "%s", buf);
}

Test(inputs, search_precision_schedule_and_interleave) {
  par_gpt_config_t m = {.layers = 24, .hidden = 1024, .heads = 16, .seq = 1024, .vocab = 51200, .recompute = 1};
  par_cluster_t c;
  par_cluster_preset("dgx-a100-40gb", &c, NULL, 0);
  par_search_opts_t o = PAR_SEARCH_OPTS_DEFAULTS;
  o.global_batch = 64;
  o.try_recompute = 0;
  o.max_zero_stage = 0;
  o.precisions = 1 << PAR_PREC_FP32 | 1 << PAR_PREC_BF16;
  o.schedules = 1 << PAR_SCHED_GPIPE | 1 << PAR_SCHED_1F1B | 1 << PAR_SCHED_INTERLEAVED;
  size_t n = 0;
  cr_assert_eq(par_plan_search(&m, &c, NULL, &o, NULL, 0, &n), 0);
  par_plan_entry_t *e = calloc(n, sizeof *e);
  cr_assert_eq(par_plan_search(&m, &c, NULL, &o, e, n, &n), 0);
  int prec[3] = {0}, sched[3] = {0}, inter[32] = {0};
  for (size_t i = 0; i < n; i++) {
    const par_layout_t *l = &e[i].layout;
    cr_expect_eq(e[i].recompute, 1, "the model's recompute is kept");
    prec[l->precision]++;
    if (l->pp == 1) {
      cr_expect(l->schedule == PAR_SCHED_1F1B && l->interleave == 1, "one schedule without a pipeline");
      continue;
    }
    sched[l->schedule]++;
    if (l->schedule == PAR_SCHED_INTERLEAVED) {
      /* by default every chunk count >= 2 that divides a stage's layers */
      cr_expect(l->interleave >= 2 && (m.layers / l->pp) % l->interleave == 0, "pp %d interleave %d", l->pp,
                l->interleave);
      inter[l->interleave]++;
    } else {
      cr_expect_eq(l->interleave, 1);
    }
  }
  cr_expect(prec[PAR_PREC_FP32] > 0 && prec[PAR_PREC_BF16] > 0 && prec[PAR_PREC_FP16] == 0);
  cr_expect(sched[PAR_SCHED_GPIPE] > 0 && sched[PAR_SCHED_1F1B] > 0 && sched[PAR_SCHED_INTERLEAVED] > 0);
  cr_expect(inter[2] > 0 && inter[3] > 0 && inter[12] > 0 && inter[5] == 0, "pp 2: 12 layers a stage");
  /* bf16 beats fp32 on A100: the best layout is bf16 */
  cr_expect(e[0].plan.fits && e[0].layout.precision == PAR_PREC_BF16);
  free(e);

  /* interleave fixed at 2 */
  o.schedules = 1 << PAR_SCHED_INTERLEAVED;
  o.interleaves = 1 << 2;
  cr_assert_eq(par_plan_search(&m, &c, NULL, &o, NULL, 0, &n), 0);
  e = calloc(n, sizeof *e);
  cr_assert_eq(par_plan_search(&m, &c, NULL, &o, e, n, &n), 0);
  for (size_t i = 0; i < n; i++)
    if (e[i].layout.pp > 1)
      cr_expect(e[i].layout.schedule == PAR_SCHED_INTERLEAVED && e[i].layout.interleave == 2);
  free(e);

  /* options out of their ranges */
  par_search_opts_t bad = o;
  bad.max_zero_stage = 4;
  cr_expect_eq(par_plan_search(&m, &c, NULL, &bad, NULL, 0, &n), STRATA_EINVAL);
  bad = o, bad.precisions = 1 << 3;
  cr_expect_eq(par_plan_search(&m, &c, NULL, &bad, NULL, 0, &n), STRATA_EINVAL);
  bad = o, bad.interleaves = 1 << 1;
  cr_expect_eq(par_plan_search(&m, &c, NULL, &bad, NULL, 0, &n), STRATA_EINVAL);
  bad = o, bad.global_batch = 0;
  cr_expect_eq(par_plan_search(&m, &c, NULL, &bad, NULL, 0, &n), STRATA_EINVAL);
  par_plan_params_t p = PAR_PLAN_PARAMS_DEFAULTS;
  p.gemm_efficiency = -0.5;
  cr_expect_eq(par_plan_search(&m, &c, &p, &o, NULL, 0, &n), STRATA_EINVAL);
}

/* Rejections by cause: one cause over many sizes counts once, the counts
 * add up to every rejected layout, and the print shows every cause however
 * small `top` is. */
Test(inputs, rejections_grouped_by_cause) {
  par_gpt_config_t m = {.layers = 48, .hidden = 4096, .heads = 32, .seq = 1024, .vocab = 51200};
  par_cluster_t c;
  par_cluster_preset("dgx-a100-40gb", &c, NULL, 0);
  c.nodes = 2;
  par_search_opts_t o = PAR_SEARCH_OPTS_DEFAULTS;
  o.global_batch = 32;
  size_t n = 0;
  cr_assert_eq(par_plan_search(&m, &c, NULL, &o, NULL, 0, &n), 0);
  par_plan_entry_t *e = calloc(n, sizeof *e);
  cr_assert_eq(par_plan_search(&m, &c, NULL, &o, e, n, &n), 0);
  size_t nc = 0, rejected = 0, sum = 0;
  cr_assert_eq(par_plan_search_causes(e, n, NULL, 0, &nc), 0);
  par_plan_cause_t *cs = calloc(nc, sizeof *cs);
  cr_assert_eq(par_plan_search_causes(e, n, cs, nc, &nc), 0);
  for (size_t i = 0; i < n; i++) rejected += !e[i].plan.fits;
  int too_big = 0;
  for (size_t k = 0; k < nc; k++) {
    sum += cs[k].count;
    cr_expect(strchr(cs[k].cause, '#') != NULL, "%s", cs[k].cause);
    cr_expect(!e[cs[k].first].plan.fits);
    for (size_t j = 0; j < k; j++) cr_expect(strcmp(cs[j].cause, cs[k].cause) != 0, "cause listed twice");
    /* too big before invalid, and the most common first within each */
    int big = e[cs[k].first].plan.valid;
    if (k > 0 && big == (int)e[cs[k - 1].first].plan.valid) cr_expect(cs[k].count <= cs[k - 1].count);
    if (k > 0) cr_expect(big <= (int)e[cs[k - 1].first].plan.valid);
    too_big += big && strstr(cs[k].cause, "needs # GB per device of # GB") == cs[k].cause;
  }
  cr_expect_eq(sum, rejected);
  cr_expect(too_big >= 1 && too_big <= 6, "too big: one cause per largest category, not per size (%d)", too_big);
  cr_expect(nc < 20, "%zu causes", nc);
  char *buf = calloc(1 << 16, 1);
  FILE *f = fmemopen(buf, (1 << 16) - 1, "w");
  par_plan_search_print(f, e, n, 1);
  fclose(f);
  for (size_t k = 0; k < nc; k++)
    cr_expect(strstr(buf, e[cs[k].first].plan.why) != NULL, "cause %zu missing from the print:\n%s", k, buf);
  char head[64];
  snprintf(head, sizeof head, "%zu rejected for %zu causes:", rejected, nc);
  cr_expect(strstr(buf, head) != NULL, "%s", buf);
  free(buf);
  free(cs);
  free(e);
}

/* Degrees as large as an int holds are rejected with their numbers, never
 * multiplied past 64 bits (the sanitizer build checks). */
Test(inputs, huge_degrees_do_not_overflow) {
  par_gpt_config_t m = {.layers = 4, .hidden = 64, .heads = 4, .seq = 64, .vocab = 256};
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  char why[256];
  l.dp = l.tp = l.pp = l.sp = 2147483647;
  cr_expect_eq(par_layout_validate(&m, &l, 8, why, sizeof why), STRATA_EINVAL);
  cr_expect(strstr(why, "not the 8 devices") != NULL, "%s", why);
  l = (par_layout_t)PAR_LAYOUT_DEFAULTS;
  l.pp = 2, l.schedule = PAR_SCHED_INTERLEAVED, l.interleave = 2147483647, l.global_batch = 2;
  cr_expect_eq(par_layout_validate(&m, &l, 2, why, sizeof why), STRATA_EINVAL);
  cr_expect_str_eq(why, "layers 4 are not divisible by 2 stages x 2147483647 chunks");
}
