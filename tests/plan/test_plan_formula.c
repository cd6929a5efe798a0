/* Closed forms of the planner against the papers' figures: ZeRO's Table 1
 * (all 18 cells, as printed), Megatron's parameter counts, FLOPs and
 * training-time examples. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include <strata/parallel.h>

/* ZeRO (arXiv 1910.02054) Table 1: GB per device for 7.5B, 128B, 1T at
 * stages 1/2/3 and Nd = 1..1024, as the paper prints them. */
static const double zero_nd[6] = {1, 4, 16, 64, 256, 1024};
static const double zero_params[3] = {7.5e9, 128e9, 1e12};
static const double zero_table[6][3][3] = {
    {{120, 120, 120}, {2048, 2048, 2048}, {16000, 16000, 16000}},
    {{52.5, 41.3, 30}, {896, 704, 512}, {7000, 5500, 4000}},
    {{35.6, 21.6, 7.5}, {608, 368, 128}, {4750, 2875, 1000}},
    {{31.4, 16.6, 1.88}, {536, 284, 32}, {4187, 2218, 250}},
    {{30.4, 15.4, 0.47}, {518, 263, 8}, {4046, 2054, 62.5}},
    {{30.1, 15.1, 0.12}, {513, 257, 2}, {4011, 2013, 15.6}},
};

Test(zero, table1_all_18_cells_as_printed) {
  int cells = 0;
  for (int r = 0; r < 6; r++)
    for (int m = 0; m < 3; m++)
      for (int st = 1; st <= 3; st++) {
        double out[3];
        cr_assert_eq(par_zero_model_states(zero_params[m], (int)zero_nd[r], st, 12.0, out), 0);
        double gb = (out[0] + out[1] + out[2]) / 1e9;
        char buf[32];
        par_zero_format_gb(gb, buf, sizeof buf);
        /* Exact: the printed figure parsed back equals the paper's. */
        cr_expect_eq(strtod(buf, NULL), zero_table[r][m][st - 1],
                     "Nd %g, P %g, stage %d: computed %s, published %g", zero_nd[r],
                     zero_params[m], st, buf, zero_table[r][m][st - 1]);
        cells++;
      }
  cr_assert_eq(cells, 54); /* 18 (Nd, model) cells x 3 stages */
}

Test(zero, model_states_match_paper_formulas) {
  /* sec. 5.1: stage 1 4P + KP/Nd, stage 2 2P + (2+K)P/Nd, stage 3 (4+K)P/Nd. */
  const double P = 3.3e9, K = 12.0;
  for (int nd = 1; nd <= 4096; nd *= 2) {
    double o[3], want[4] = {(4 + K) * P, 4 * P + K * P / nd, 2 * P + (2 + K) * P / nd,
                             (4 + K) * P / nd};
    for (int st = 0; st <= 3; st++) {
      par_zero_model_states(P, nd, st, K, o);
      double got = o[0] + o[1] + o[2];
      /* Same arithmetic in another order: a few ulps apart at most. */
      cr_expect(fabs(got - want[st]) <= 1e-12 * want[st], "nd %d stage %d: %g vs %g", nd, st, got,
                want[st]);
    }
  }
  double o[3];
  cr_expect_eq(par_zero_model_states(P, 0, 1, K, o), STRATA_EINVAL);
  cr_expect_eq(par_zero_model_states(P, 4, 4, K, o), STRATA_EINVAL);
  cr_expect_eq(par_zero_model_states(P, 4, 1, K, NULL), STRATA_EINVAL);
}

Test(zero, print_convention) {
  char b[32];
  cr_expect_str_eq(par_zero_format_gb(41.25, b, sizeof b), "41.3"); /* half up, not to even */
  cr_expect_str_eq(par_zero_format_gb(4187.5, b, sizeof b), "4187"); /* truncated */
  cr_expect_str_eq(par_zero_format_gb(1.875, b, sizeof b), "1.88");
  cr_expect_str_eq(par_zero_format_gb(0.1171875, b, sizeof b), "0.12");
}

/* Megatron-LM (arXiv 2104.04473) Table 1 rows of PUBLISHED.md. */
typedef struct {
  double billions;
  int heads, h, l;
} mrow_t;
static const mrow_t mrows[] = {{1.7, 24, 2304, 24}, {18.4, 48, 6144, 40}, {145.6, 96, 12288, 80}};

Test(megatron, parameter_counts_equal_published_sizes) {
  for (size_t i = 0; i < sizeof mrows / sizeof mrows[0]; i++) {
    par_gpt_config_t m = {.layers = mrows[i].l, .hidden = mrows[i].h, .heads = mrows[i].heads,
                          .seq = 2048, .vocab = 51200, .recompute = 1};
    double p = par_megatron_param_count(&m);
    /* The paper prints one decimal in billions. */
    double printed = floor(p / 1e8 + 0.5) / 10.0;
    cr_expect_eq(printed, mrows[i].billions, "row %zu: %.4g -> %.1f B", i, p, printed);
    /* strata's GPT has the final layernorm too: exactly 2h more. */
    cr_expect_eq(par_plan_param_count(&m) - p, 2.0 * m.hidden);
  }
}

Test(megatron, param_count_matches_tensor_by_tensor_sum) {
  /* An independent count of strata's GPT, tensor by tensor. */
  par_gpt_config_t m = {.layers = 3, .hidden = 48, .heads = 4, .seq = 32, .vocab = 100};
  double h = m.hidden, blk = 0;
  blk += 2 * h;             /* ln1 */
  blk += h * 3 * h + 3 * h; /* qkv */
  blk += h * h + h;         /* attention projection */
  blk += 2 * h;             /* ln2 */
  blk += h * 4 * h + 4 * h; /* fc */
  blk += 4 * h * h + h;     /* fc projection */
  double want = m.layers * blk + m.vocab * h + m.seq * h + 2 * h;
  cr_expect_eq(par_plan_param_count(&m), want);
}

Test(megatron, flops_formula_matches_per_matmul_count) {
  /* Count the matmuls of one block (arXiv 2104.04473 appendix): QKV 6Bsh^2,
   * QK^T 2Bs^2h, attention-times-V 2Bs^2h, projection 2Bsh^2, MLP 16Bsh^2;
   * logits 2BshV; backward 2x; recompute one more forward of the blocks. */
  par_gpt_config_t m = {.layers = 96, .hidden = 12288, .heads = 96, .seq = 2048, .vocab = 51200};
  double B = 1536, s = m.seq, h = m.hidden, l = m.layers, V = m.vocab;
  double blk = 6 * B * s * h * h + 2 * B * s * s * h + 2 * B * s * s * h + 2 * B * s * h * h +
               16 * B * s * h * h;
  double logit = 2 * B * s * h * V;
  double with_rc = 4 * l * blk + 3 * logit, without = 3 * l * blk + 3 * logit;
  cr_expect(fabs(par_megatron_flops(&m, B, 1) / with_rc - 1) < 1e-12);
  cr_expect(fabs(par_megatron_flops(&m, B, 0) / without - 1) < 1e-12);
  /* And the paper's closed form itself. */
  double F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  cr_expect(fabs(par_megatron_flops(&m, B, 1) / F - 1) < 1e-12);
}

Test(megatron, training_time_examples) {
  /* sec. 5.1: GPT-3 (175B) on 300B tokens, 1024 A100 at 140 TFLOP/s: 34
   * days; 1T on 450B tokens, 3072 A100 at 163 TFLOP/s: 84 days. P from
   * the models' shapes (GPT-3: 96 x 12288, 96 heads; 1T: 128 x 25600, 160
   * heads). Within 2%: the paper rounds to whole days and P to 175B / 1T. */
  par_gpt_config_t g3 = {.layers = 96, .hidden = 12288, .heads = 96, .seq = 2048, .vocab = 51200};
  par_gpt_config_t t1 = {.layers = 128, .hidden = 25600, .heads = 160, .seq = 2048, .vocab = 51200};
  double d3 = par_megatron_train_seconds(300e9, par_megatron_param_count(&g3), 1024, 140e12) / 86400;
  double d1 = par_megatron_train_seconds(450e9, par_megatron_param_count(&t1), 3072, 163e12) / 86400;
  cr_expect(fabs(d3 / 34 - 1) < 0.02, "GPT-3: %.2f days", d3);
  cr_expect(fabs(d1 / 84 - 1) < 0.02, "1T: %.2f days", d1);
  /* The 8TP approximation of F: F / (B s) over 8P within 3% at this size
   * (the s/(6h) attention term is what the paper drops). */
  double r = par_megatron_flops(&g3, 1, 1) / g3.seq / (8 * par_megatron_param_count(&g3));
  cr_expect(fabs(r - 1) < 0.03, "F/(8 P B s) = %.4f", r);
}

Test(megatron, planner_count_equals_the_runtime_model) {
  /* The planner's parameter count is the length of the real GPT's flat
   * parameter array (libparallel/src/model/gpt.c), for shapes large and small. */
  const par_gpt_config_t cfgs[] = {
      {.layers = 2, .hidden = 64, .heads = 4, .seq = 64, .vocab = 256},
      {.layers = 12, .hidden = 768, .heads = 12, .seq = 1024, .vocab = 50304},
      {.layers = 80, .hidden = 12288, .heads = 96, .seq = 2048, .vocab = 51200},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
    cr_expect_eq(par_plan_param_count(&cfgs[i]), (double)par_gpt_param_count(&cfgs[i]), "config %zu", i);
}
