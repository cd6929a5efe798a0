/* Layout search ordering on small clusters, reproductions, Lua presets. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/parallel.h>

static par_plan_entry_t *search(const par_gpt_config_t *m, const par_cluster_t *c,
                                const par_search_opts_t *o, size_t *n) {
  cr_assert_eq(par_plan_search(m, c, NULL, o, NULL, 0, n), 0);
  cr_assert(*n > 0);
  par_plan_entry_t *e = calloc(*n, sizeof *e);
  size_t n2;
  cr_assert_eq(par_plan_search(m, c, NULL, o, e, *n, &n2), 0);
  cr_assert_eq(n2, *n);
  return e;
}

Test(search, ordering_and_reasons) {
  par_gpt_config_t m = {.layers = 24, .hidden = 2048, .heads = 16, .seq = 1024, .vocab = 51200};
  par_cluster_t c;
  par_cluster_preset("dgx-a100-40gb", &c, NULL, 0);
  c.nodes = 2;
  par_search_opts_t o = PAR_SEARCH_OPTS_DEFAULTS;
  o.global_batch = 64;
  size_t n;
  par_plan_entry_t *e = search(&m, &c, &o, &n);
  /* Fitting first by tokens/s, then too big, then invalid. */
  int phase = 0;
  for (size_t i = 0; i < n; i++) {
    int ph = e[i].plan.fits ? 0 : e[i].plan.valid ? 1 : 2;
    cr_assert(ph >= phase, "entry %zu out of order", i);
    if (ph == 0 && i > 0 && phase == 0)
      cr_assert(e[i].plan.tokens_per_s <= e[i - 1].plan.tokens_per_s);
    if (ph) cr_assert(strlen(e[i].plan.why) > 0, "entry %zu has no reason", i);
    phase = ph;
  }
  /* A 1.2B model fits one A100: on 16 GPUs the best layout is data
   * parallel (no tensor or pipeline traffic), and re-estimating it gives
   * the same figure. */
  cr_assert(e[0].plan.fits);
  cr_expect_eq(e[0].layout.tp, 1);
  cr_expect_eq(e[0].layout.pp, 1);
  cr_expect_eq(e[0].layout.dp, 16);
  par_gpt_config_t mm = m;
  mm.recompute = e[0].recompute;
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&mm, &e[0].layout, &c, NULL, &r), 0);
  cr_expect_eq(r.tokens_per_s, e[0].plan.tokens_per_s);
  /* A prefix copy. */
  par_plan_entry_t two[2];
  size_t n2;
  cr_assert_eq(par_plan_search(&m, &c, NULL, &o, two, 2, &n2), 0);
  cr_expect_eq(n2, n);
  cr_expect_eq(memcmp(&two[1].layout, &e[1].layout, sizeof two[1].layout), 0);
  free(e);
}

Test(search, big_model_needs_sharding) {
  /* 10B on 8 x A100 40 GB: plain data parallel needs 160 GB per GPU of
   * model states and ZeRO-1 4P + 12P/8 = 55 GB; ZeRO-2 (2P + 14P/8 = 37.5
   * GB) just fits, as do tensor and pipeline splits. The rejected plain
   * layouts say why. */
  par_gpt_config_t m = {.layers = 48, .hidden = 4096, .heads = 32, .seq = 1024, .vocab = 51200};
  par_cluster_t c;
  par_cluster_preset("dgx-a100-40gb", &c, NULL, 0);
  par_search_opts_t o = PAR_SEARCH_OPTS_DEFAULTS;
  o.global_batch = 32;
  size_t n;
  par_plan_entry_t *e = search(&m, &c, &o, &n);
  int fitting = 0, plain_rejected = 0;
  for (size_t i = 0; i < n; i++) {
    const par_layout_t *l = &e[i].layout;
    if (e[i].plan.fits) {
      fitting++;
      cr_expect(l->zero_stage >= 2 || l->tp > 1 || l->pp > 1, "entry %zu fits unsharded: dp %d tp %d pp %d zero %d: %.1f GB",
                i, l->dp, l->tp, l->pp, l->zero_stage, e[i].plan.mem_total / 1e9);
    } else if (l->dp == 8 && l->zero_stage == 0 && e[i].plan.valid) {
      plain_rejected++;
      cr_expect(strstr(e[i].plan.why, "needs") != NULL, "%s", e[i].plan.why);
    }
  }
  cr_expect(fitting > 0);
  cr_expect(plain_rejected > 0);
  char buf[16384] = {0};
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  cr_expect_eq(par_plan_search_print(f, e, n, 5), 0);
  fclose(f);
  cr_expect(strstr(buf, "layouts fit; ") != NULL && strstr(buf, " rejected for ") != NULL, "%s", buf);
  free(e);
}

Test(search, tensor_modes_and_bad_options) {
  par_gpt_config_t m = {.layers = 8, .hidden = 1024, .heads = 16, .seq = 512, .vocab = 4096};
  par_cluster_t c;
  par_cluster_preset("dgx-h100", &c, NULL, 0);
  par_search_opts_t o = PAR_SEARCH_OPTS_DEFAULTS;
  o.global_batch = 16;
  o.tp_modes = (1 << PAR_TP_1D) | (1 << PAR_TP_2D) | (1 << PAR_TP_2P5D) | (1 << PAR_TP_3D);
  size_t n;
  par_plan_entry_t *e = search(&m, &c, &o, &n);
  int seen[4] = {0};
  for (size_t i = 0; i < n; i++)
    if (e[i].plan.valid) seen[e[i].layout.tp_mode] = 1;
  cr_expect(seen[0] && seen[1] && seen[2] && seen[3], "2d tp 4, 2.5d tp 8 = 2^2 x 2, 3d tp 8");
  free(e);
  o.global_batch = 0;
  cr_expect_eq(par_plan_search(&m, &c, NULL, &o, NULL, 0, &n), STRATA_EINVAL);
}

Test(reproduce, every_result_runs) {
  for (int i = 0; par_plan_reproduce_name(i); i++) {
    const char *w = par_plan_reproduce_name(i);
    size_t n = 0;
    cr_assert_eq(par_plan_reproduce(w, NULL, NULL, 0, &n), 0, "%s", w);
    cr_expect(n > 0, "%s", w);
    par_repro_row_t *rows = calloc(n, sizeof *rows);
    cr_assert_eq(par_plan_reproduce(w, NULL, rows, n, &n), 0, "%s", w);
    for (size_t k = 0; k < n; k++) cr_expect(isfinite(rows[k].predicted), "%s: %s", w, rows[k].label);
    free(rows);
    FILE *f = tmpfile();
    cr_expect_eq(par_plan_reproduce_print(f, w, NULL), 0);
    fclose(f);
  }
  size_t n;
  cr_expect_eq(par_plan_reproduce("zero-table9", NULL, NULL, 0, &n), STRATA_ENOTFOUND);
}

static void rows_of(const char *w, par_repro_row_t *rows, size_t cap, size_t *n) {
  cr_assert_eq(par_plan_reproduce(w, NULL, rows, cap, n), 0);
  cr_assert(*n <= cap);
}

Test(reproduce, exact_and_bounded_results) {
  par_repro_row_t rows[64];
  size_t n;
  /* ZeRO Table 1 and Colossal-AI's terms: exact. */
  rows_of("zero-table1", rows, 64, &n);
  cr_expect_eq(n, 54u);
  for (size_t i = 0; i < n; i++) cr_expect_eq(rows[i].rel_err, 0.0, "%s", rows[i].label);
  rows_of("colossal-tp", rows, 64, &n);
  for (size_t i = 0; i < n; i++)
    cr_expect(fabs(rows[i].rel_err) < 1e-12, "%s: %g vs %g", rows[i].label, rows[i].predicted,
              rows[i].published);
  /* Megatron: the bounds (15% throughput, 2% time). */
  rows_of("megatron-table1", rows, 64, &n);
  cr_expect_eq(n, 3u);
  for (size_t i = 0; i < n; i++) cr_expect(fabs(rows[i].rel_err) < 0.15, "%s", rows[i].label);
  rows_of("megatron-time", rows, 64, &n);
  cr_expect(fabs(rows[0].rel_err) < 0.02 && fabs(rows[1].rel_err) < 0.02);
  /* ZeRO's communication volumes: 2P / 2P / 2P / 3P up to (N-1)/N at N = 1024. */
  rows_of("zero-comm", rows, 64, &n);
  for (size_t i = 0; i < 4; i++) cr_expect(fabs(rows[i].rel_err) < 1.0 / 1024 + 1e-9, "%s", rows[i].label);
  /* The trillion-parameter figures within the rounding of "16 TB" and "400". */
  rows_of("deepspeed-1t", rows, 64, &n);
  for (size_t i = 0; i < n; i++) cr_expect(fabs(rows[i].rel_err) < 0.02, "%s", rows[i].label);
  rows_of("mtnlg", rows, 64, &n);
  cr_expect(fabs(rows[0].rel_err) < 0.01);
  cr_expect_eq(rows[1].predicted, 1.0, "MT-NLG's layout fits");
}

/* recipes/clusters/NAME.lua must hold the C preset's figures: read its
 * one-key-per-line form (no Lua needed here) through par_cluster_set into a
 * zeroed struct, which must then equal the preset byte for byte. */
Test(cluster, lua_tables_match_c_presets) {
  for (int i = 0; par_cluster_preset_name(i); i++) {
    par_cluster_t c, lua;
    par_cluster_preset(par_cluster_preset_name(i), &c, NULL, 0);
    memset(&lua, 0, sizeof lua);
    char path[256], line[512], prefix[32] = "";
    snprintf(path, sizeof path, "recipes/clusters/%s.lua", c.name);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s missing (run from the repository root)", path);
    int keys = 0;
    while (fgets(line, sizeof line, f)) {
      char key[64], name[64];
      double v;
      if (sscanf(line, " name = \"%63[^\"]\"", name) == 1) {
        snprintf(lua.name, sizeof lua.name, "%s", name);
      } else if (sscanf(line, " %63[a-z_] = %c", key, name) == 2 && name[0] == '{') {
        snprintf(prefix, sizeof prefix, "%.30s.", key); /* peak_flops = {, gemm_efficiency = { */
      } else if (sscanf(line, " %63[a-z0-9_] = %lf", key, &v) == 2) {
        char full[96];
        snprintf(full, sizeof full, "%s%s", prefix, key);
        cr_expect_eq(par_cluster_set(&lua, full, v), 0, "%s: key %s", path, full);
        keys++;
      } else if (strstr(line, "},")) {
        prefix[0] = '\0';
      }
    }
    fclose(f);
    int nkeys = 0;
    while (par_cluster_key(nkeys)) nkeys++;
    cr_expect_eq(keys, nkeys, "%s: %d of %d keys", path, keys, nkeys);
    cr_expect_eq(memcmp(&lua, &c, sizeof c), 0, "%s differs from the C preset", path);
  }
}

Test(cluster, keys_cover_every_field) {
  /* Setting every key of a preset onto a zeroed struct (and the name)
   * rebuilds it exactly: no field lacks a key. */
  par_cluster_t c, d;
  par_cluster_preset("dgx-h100", &c, NULL, 0);
  c.nodes = 7;
  memset(&d, 0, sizeof d);
  snprintf(d.name, sizeof d.name, "%s", c.name);
  for (int i = 0; par_cluster_key(i); i++) {
    double v;
    cr_assert_eq(par_cluster_get(&c, par_cluster_key(i), &v), 0);
    cr_assert_eq(par_cluster_set(&d, par_cluster_key(i), v), 0);
  }
  cr_expect_eq(memcmp(&c, &d, sizeof c), 0);
  cr_expect_eq(par_cluster_set(&d, "gpu_memory", 1), STRATA_ENOTFOUND);
  cr_expect_eq(par_cluster_set(&d, "nodes", 2.5), STRATA_EINVAL);
  cr_expect_eq(par_cluster_set(&d, "intra_bw", NAN), STRATA_EINVAL);

  par_plan_params_t p = PAR_PLAN_PARAMS_DEFAULTS, q;
  memset(&q, 0, sizeof q);
  int n = 0;
  for (; par_plan_params_key(n); n++) {
    double v;
    cr_assert_eq(par_plan_params_get(&p, par_plan_params_key(n), &v), 0);
    cr_assert_eq(par_plan_params_set(&q, par_plan_params_key(n), v), 0);
  }
  cr_expect_eq((size_t)n, sizeof p / sizeof(double), "every parameter has a key");
  cr_expect_eq(memcmp(&p, &q, sizeof p), 0);
  cr_expect_eq(par_plan_params_set(&q, "gemm_eff", 0.5), STRATA_ENOTFOUND);
}

/* ZeRO-3 without model parallelism for GPT-3 175B on 1536 A100 (the
 * comparison of Megatron-LM's sec. 5): each rank gathers and reduces 3 Psi
 * per step whatever the data-parallel degree, one collective per region with
 * the ring's latency over 1535 hops, while its compute shrinks with the
 * microbatch. At microbatch 1 the forward's gathers outlast the forward's
 * compute (exposed communication), and the search prefers a 3D layout by
 * tokens/s; at 1/4 of the ranks (microbatch 4) the same gathers hide. */
Test(search, zero3_against_3d_for_gpt3) {
  par_gpt_config_t m = {.layers = 96, .hidden = 12288, .heads = 96, .seq = 2048, .vocab = 51200, .recompute = 1};
  par_cluster_t c;
  par_cluster_preset("dgx-a100-80gb", &c, NULL, 0);
  c.nodes = 192;
  par_layout_t z = PAR_LAYOUT_DEFAULTS;
  z.dp = 1536, z.zero_stage = 3, z.microbatch = 1, z.global_batch = 1536, z.precision = PAR_PREC_BF16;
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&m, &z, &c, NULL, &r), 0, "%s", r.why);
  double exposed = r.time[PAR_T_ZERO3] + r.time[PAR_T_DP];
  cr_expect(exposed > 0.1 * r.time[PAR_T_COMPUTE], "ZeRO-3 at microbatch 1: %.2f s exposed of %.2f s compute",
            exposed, r.time[PAR_T_COMPUTE]);
  /* the gathers' bytes are 2 Psi per microbatch, the reduce-scatter's Psi */
  double psi = r.params * 2.0 * 1535.0 / 1536.0;
  cr_expect(fabs(r.comm_bytes[PAR_T_ZERO3] / psi - 2.0) < 0.01 && fabs(r.comm_bytes[PAR_T_DP] / psi - 1.0) < 0.01,
            "ZeRO-3 bytes %.3g + %.3g, Psi %.3g", r.comm_bytes[PAR_T_ZERO3], r.comm_bytes[PAR_T_DP], psi);
  par_search_opts_t o = PAR_SEARCH_OPTS_DEFAULTS;
  o.global_batch = 1536;
  size_t n;
  par_gpt_config_t mm = m;
  mm.recompute = 0; /* the search tries both */
  par_plan_entry_t *e = search(&mm, &c, &o, &n);
  cr_assert(e[0].plan.fits);
  cr_expect(e[0].layout.tp > 1 && e[0].layout.pp > 1, "best layout dp %d tp %d pp %d zero %d", e[0].layout.dp,
            e[0].layout.tp, e[0].layout.pp, e[0].layout.zero_stage);
  cr_expect(e[0].plan.tokens_per_s > 1.1 * r.tokens_per_s, "3D %.4g tokens/s, ZeRO-3 %.4g", e[0].plan.tokens_per_s,
            r.tokens_per_s);
  free(e);
  /* 384 ranks, microbatch 4: the same communication hides behind 4x the compute */
  c.nodes = 48;
  z.dp = 384, z.microbatch = 4;
  cr_assert_eq(par_plan_estimate(&m, &z, &c, NULL, &r), 0, "%s", r.why);
  exposed = r.time[PAR_T_ZERO3] + r.time[PAR_T_DP];
  cr_expect(exposed < 0.02 * r.time[PAR_T_COMPUTE], "ZeRO-3 at microbatch 4: %.2f s exposed of %.2f s", exposed,
            r.time[PAR_T_COMPUTE]);
}
