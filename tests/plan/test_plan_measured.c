/* The planner against strata's own GPT: the same par_gpt_config_t drives a
 * real forward + backward on the CPU and an estimate, and libtensor's
 * accountant (par_gpt_memory) gives the measured bytes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include <strata/parallel.h>

static void compare(par_gpt_config_t m, int B) {
  par_gpt_t *g = NULL;
  cr_assert_eq(par_gpt_create(&g, &m, 7), 0, "%s", par_gpt_create_error());
  size_t states = 0, peak = 0, cur = 0;
  cr_assert_eq(par_gpt_memory(g, &states, &peak), 0);
  int32_t *tok = malloc(sizeof(int32_t) * B * m.seq), *tgt = malloc(sizeof(int32_t) * B * m.seq);
  for (int i = 0; i < B * m.seq; i++) tok[i] = (i * 7) % m.vocab, tgt[i] = (i * 7 + 1) % m.vocab;
  float loss;
  cr_assert_eq(par_gpt_forward(g, tok, tgt, B, m.seq, &loss), 0);
  cr_assert_eq(par_gpt_backward(g), 0);
  cr_assert_eq(par_gpt_memory(g, &cur, &peak), 0);
  par_gpt_destroy(g);
  free(tok), free(tgt);

  /* The run: one fp32 replica on the CPU, no optimizer yet, no dropout.
   * strata's GPT keeps llm.c's set per block (16 h-wide values per token
   * with the residual stream), no attention scores (log-sum-exp only), and
   * 14 h-wide gradient buffers for the block in backward. */
  par_cluster_t c;
  par_cluster_preset("this-machine", &c, NULL, 0);
  par_layout_t l = PAR_LAYOUT_DEFAULTS;
  l.microbatch = l.global_batch = B;
  par_plan_params_t p;
  par_plan_params_engine(&p);
  p.shard_align = 0; /* a bare model, no engine: unpadded */
  par_plan_t r;
  cr_assert_eq(par_plan_estimate(&m, &l, &c, &p, &r), 0, "%s", r.why);
  /* Parameters + gradients: exact (two fp32 flat arrays). */
  cr_expect_eq((double)states, r.mem[PAR_MEM_PARAMS] + r.mem[PAR_MEM_GRADS]);
  /* Activations: within 10%. What the planner leaves out is per-token
   * bookkeeping, (4 + heads) floats per token per block (layernorm mean and
   * rstd, log-sum-exp), the final layernorm's output and the token ids: a
   * few percent at these shapes. */
  double act = (double)(peak - states);
  cr_expect(fabs(r.mem[PAR_MEM_ACTIV] / act - 1) < 0.10, "L %d h %d B %d recompute %d: predicted %.0f, measured %.0f",
            m.layers, m.hidden, B, m.recompute, r.mem[PAR_MEM_ACTIV], act);
}

Test(measured, planner_memory_matches_the_cpu_gpt) {
  compare((par_gpt_config_t){.layers = 2, .hidden = 64, .heads = 4, .seq = 64, .vocab = 256}, 4);
  compare((par_gpt_config_t){.layers = 4, .hidden = 128, .heads = 8, .seq = 128, .vocab = 512}, 2);
  compare((par_gpt_config_t){.layers = 3, .hidden = 96, .heads = 2, .seq = 256, .vocab = 1000}, 3);
  compare((par_gpt_config_t){.layers = 4, .hidden = 128, .heads = 8, .seq = 128, .vocab = 512,
                             .recompute = 1}, 2);
}
