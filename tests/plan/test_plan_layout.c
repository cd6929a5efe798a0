/* Layout validation: every rejection names its numbers, nothing crashes. */
#include <criterion/criterion.h>
#include <string.h>

#include <strata/parallel.h>

static par_gpt_config_t model(void) {
  par_gpt_config_t m = {.layers = 8, .hidden = 512, .heads = 8, .seq = 256, .vocab = 1024};
  return m;
}

static par_layout_t layout(int dp, int tp, int pp) {
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.dp = dp;
  l.tp = tp;
  l.pp = pp;
  l.global_batch = 8 * dp;
  return l;
}

static void expect_reject(const par_gpt_config_t *m, const par_layout_t *l, int world,
                          const char *needle) {
  char why[256];
  int rc = par_layout_validate(m, l, world, why, sizeof why);
  cr_expect_eq(rc, STRATA_EINVAL, "accepted; expected a reason containing '%s'", needle);
  cr_expect(strstr(why, needle) != NULL, "reason '%s' lacks '%s'", why, needle);
}

Test(layout, valid_layouts_pass) {
  par_gpt_config_t m = model();
  char why[256];
  par_layout_t l = layout(2, 4, 2);
  cr_expect_eq(par_layout_validate(&m, &l, 16, why, sizeof why), 0, "%s", why);
  cr_expect_str_eq(why, "");
  l = layout(1, 4, 1);
  l.tp_mode = PAR_TP_2D;
  cr_expect_eq(par_layout_validate(&m, &l, 4, why, sizeof why), 0, "%s", why);
  l = layout(1, 8, 1);
  l.tp_mode = PAR_TP_3D;
  cr_expect_eq(par_layout_validate(&m, &l, 8, why, sizeof why), 0, "%s", why);
  l = layout(1, 8, 1);
  l.tp_mode = PAR_TP_2P5D;
  l.tp_depth = 2;
  cr_expect_eq(par_layout_validate(&m, &l, 8, why, sizeof why), 0, "%s", why);
  l = layout(2, 1, 4);
  l.schedule = PAR_SCHED_INTERLEAVED;
  l.interleave = 2;
  cr_expect_eq(par_layout_validate(&m, &l, 8, why, sizeof why), 0, "%s", why);
}

Test(layout, rejections_name_the_numbers) {
  par_gpt_config_t m = model();
  par_layout_t l = layout(2, 4, 2);
  expect_reject(&m, &l, 12, "dp 2 x tp 4 x pp 2 x sp 1 = 16, not the 12 devices");
  par_gpt_config_t m6 = m;
  m6.heads = 6;
  m6.hidden = 516; /* 516 / 6 = 86 */
  l = layout(1, 4, 1);
  expect_reject(&m6, &l, 4, "heads 6 are not divisible by the 1d tensor split 4");
  l = layout(1, 8, 1);
  l.tp_mode = PAR_TP_2D;
  expect_reject(&m, &l, 8, "2d tensor parallelism needs a square tp, got 8");
  l = layout(1, 4, 1);
  l.tp_mode = PAR_TP_3D;
  expect_reject(&m, &l, 4, "3d tensor parallelism needs a cubic tp, got 4");
  l = layout(1, 12, 1);
  l.tp_mode = PAR_TP_2P5D;
  l.tp_depth = 2;
  expect_reject(&m, &l, 12, "tp 12 / depth 2 = 6 is not a square");
  l = layout(1, 1, 3); /* 8 layers over 3 stages: an uneven split, 3 + 3 + 2 */
  cr_expect_eq(par_layout_validate(&m, &l, 3, NULL, 0), 0, "uneven split rejected");
  l = layout(1, 1, 9);
  expect_reject(&m, &l, 9, "layers 8 are fewer than 9 pipeline stages");
  l = layout(1, 1, 3);
  l.schedule = PAR_SCHED_INTERLEAVED, l.interleave = 2;
  expect_reject(&m, &l, 3, "layers 8 are not divisible by 3 stages x 2 chunks");
  l = layout(4, 1, 1);
  l.global_batch = 6;
  expect_reject(&m, &l, 4, "global batch 6 is not a multiple of microbatch 1 x dp 4");
  l = layout(2, 1, 2);
  l.zero_stage = 2;
  expect_reject(&m, &l, 4, "ZeRO stage 2");
  l = layout(1, 1, 1);
  l.zero_stage = 4;
  expect_reject(&m, &l, 1, "ZeRO stage 4 is not 0..3");
  l = layout(1, 1, 1);
  l.sp = 3;
  expect_reject(&m, &l, 3, "sequence 256 is not divisible by sequence-parallel degree 3");
  l = layout(1, 1, 1);
  l.offload_params = PAR_TIER_CPU;
  expect_reject(&m, &l, 1, "parameter offload needs ZeRO stage 3");
  l = layout(1, 1, 1);
  l.tp_depth = 2;
  expect_reject(&m, &l, 1, "tp_depth 2 is only for 2.5d");
  par_gpt_config_t mv = m;
  mv.vocab = 1000;
  l = layout(1, 16, 1);
  mv.heads = 16;
  expect_reject(&mv, &l, 16, "vocabulary 1000 is not divisible by the 1d tensor split 16");
  l = layout(0, 1, 1);
  expect_reject(&m, &l, 1, "degrees must be >= 1 (dp 0");
  l = layout(1, 1, 1);
  l.tp_mode = (par_tp_mode_t)7;
  expect_reject(&m, &l, 1, "unknown tensor mode 7");
  par_gpt_config_t bad = m;
  bad.hidden = 500;
  l = layout(1, 1, 1);
  expect_reject(&bad, &l, 1, "hidden 500 is not divisible by heads 8");
}

Test(layout, null_inputs_and_small_buffers) {
  par_gpt_config_t m = model();
  par_layout_t l = layout(1, 1, 1);
  cr_expect_eq(par_layout_validate(NULL, &l, 1, NULL, 0), STRATA_EINVAL);
  cr_expect_eq(par_layout_validate(&m, NULL, 1, NULL, 0), STRATA_EINVAL);
  char tiny[8];
  l = layout(3, 1, 1);
  l.global_batch = 3;
  cr_expect_eq(par_layout_validate(&m, &l, 2, tiny, sizeof tiny), STRATA_EINVAL);
  cr_expect_eq(strlen(tiny), 7u); /* truncated, terminated */
}

Test(cluster, presets_and_validation) {
  par_cluster_t c;
  char why[256];
  for (int i = 0; par_cluster_preset_name(i); i++) {
    cr_expect_eq(par_cluster_preset(par_cluster_preset_name(i), &c, why, sizeof why), 0);
    cr_expect_eq(par_cluster_validate(&c, why, sizeof why), 0, "%s", why);
  }
  cr_expect_eq(par_cluster_preset("dgx-9000", &c, why, sizeof why), STRATA_ENOTFOUND);
  cr_expect(strstr(why, "dgx-a100-80gb") != NULL, "%s", why);
  par_cluster_preset("dgx-h100", &c, NULL, 0);
  c.intra_bw = -1;
  cr_expect_eq(par_cluster_validate(&c, why, sizeof why), STRATA_EINVAL);
  cr_expect(strstr(why, "intra_bw = -1") != NULL, "%s", why);
}
