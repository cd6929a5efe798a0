/* The GPT model's head through the fused classifier
 * (par_gpt_options_t.head_chunk) on the CPU, against the default CPU head
 * (the separate ops, which the model keeps by default there): with one chunk
 * the loss and every gradient are bit for bit the default's; with several
 * only the embedding's gradient (the tied head's dW sums over the rows by
 * chunk) may differ, by float rounding. The residual add + layernorm the
 * blocks use is the separate ops on the CPU, so the default model is the
 * one the double-precision gradient check (test_gpt.c) verifies. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <strata/parallel.h>
#include <string.h>

static par_gpt_t *make(int head_chunk, int recompute) {
  par_gpt_config_t c = {
      .layers = 2, .hidden = 16, .heads = 2, .seq = 8, .vocab = 37, .recompute = recompute};
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  o.threads = 2, o.head_chunk = head_chunk;
  par_gpt_t *m = NULL;
  cr_assert_eq(par_gpt_create_ex(&m, &c, &o, 5), 0, "%s", par_gpt_create_error());
  return m;
}

enum { B = 3, T = 8, R = B * T };

static void batch(int32_t *tok, int32_t *tgt) {
  uint32_t s = 99;
  for (int i = 0; i < R; i++) {
    s = s * 1664525u + 1013904223u;
    tok[i] = (int32_t)((s >> 8) % 37u);
    tgt[i] = i % 7 == 3 ? -1 : (int32_t)((s >> 3) % 37u); /* some ignored */
  }
}

/* loss and gradients of one step (zero_grad, forward, backward) */
static float step(par_gpt_t *m, float *grads) {
  int32_t tok[R], tgt[R];
  batch(tok, tgt);
  float loss = NAN;
  size_t n = 0;
  cr_assert_eq(par_gpt_zero_grad(m), 0);
  cr_assert_eq(par_gpt_forward(m, tok, tgt, B, T, &loss), 0, "%s", par_gpt_last_error(m));
  cr_assert_eq(par_gpt_backward(m), 0, "%s", par_gpt_last_error(m));
  const float *g = par_gpt_grads(m, &n);
  memcpy(grads, g, n * sizeof(float));
  return loss;
}

static void compare(int chunk, int recompute) {
  par_gpt_t *a = make(0, recompute), *b = make(chunk, recompute);
  size_t n = 0;
  par_gpt_grads(a, &n);
  float *ga = malloc(n * sizeof(float)), *gb = malloc(n * sizeof(float));
  float la = step(a, ga), lb = step(b, gb);
  const par_gpt_view_t *wte = par_gpt_find_view(a, "wte");
  if (chunk >= R) {
    cr_expect(memcmp(&la, &lb, sizeof la) == 0, "loss %.9g vs %.9g", la, lb);
    cr_expect(memcmp(ga, gb, n * sizeof(float)) == 0, "gradients not bit-identical with one chunk");
  } else {
    /* the loss's rows are the same, summed in the same order */
    cr_expect(memcmp(&la, &lb, sizeof la) == 0, "loss %.9g vs %.9g", la, lb);
    /* dwte's sum over 24 rows regrouped by chunk: a few float roundings of
     * terms of size ~|dloss| |h| ~ 0.05: 1e-6 absolute is ~ 10 ulps */
    for (size_t i = 0; i < n; i++) {
      int in_wte = i >= wte->offset && i < wte->offset + wte->numel;
      cr_assert(fabsf(ga[i] - gb[i]) <= (in_wte ? 1e-6f + 1e-5f * fabsf(ga[i]) : 0.f),
                "grad %zu: %.9g vs %.9g%s", i, ga[i], gb[i], in_wte ? " (wte)" : "");
    }
  }
  /* fused: no logits kept after a forward with targets; without targets,
   * the same logits as the default head */
  cr_expect_null(par_gpt_logits(b));
  int32_t tok[R], tgt[R];
  batch(tok, tgt);
  cr_assert_eq(par_gpt_forward(a, tok, NULL, B, T, NULL), 0);
  cr_assert_eq(par_gpt_forward(b, tok, NULL, B, T, NULL), 0);
  cr_assert_not_null(par_gpt_logits(b));
  cr_expect(memcmp(par_gpt_logits(a), par_gpt_logits(b), (size_t)R * 37 * sizeof(float)) == 0,
            "logits differ");
  cr_expect_eq(par_gpt_backward(b), STRATA_ESTATE);
  free(ga), free(gb);
  par_gpt_destroy(a), par_gpt_destroy(b);
}

Test(gpt_fused_head, one_chunk_is_the_separate_ops_bit_for_bit) {
  compare(R, 0);
}
Test(gpt_fused_head, chunks_differ_in_the_embedding_gradient_only) {
  compare(5, 0);
}
Test(gpt_fused_head, with_recompute) {
  compare(7, 1);
}

/* The fused head keeps neither the logits nor their gradient: the model's
 * peak (reached in the head here) falls by 2 R V floats less the chunk's
 * buffers in backward (logits and their gradient, chunk x V each, and the
 * chunk's losses, which the backward does not return). */
Test(gpt_fused_head, memory_holds_one_chunk) {
  par_gpt_t *a = make(-1, 0), *b = make(4, 0);
  float *g = malloc(par_gpt_param_count(par_gpt_config(a)) * sizeof(float));
  step(a, g), step(b, g);
  size_t pa = 0, pb = 0;
  par_gpt_memory(a, NULL, &pa), par_gpt_memory(b, NULL, &pb);
  cr_expect_eq((long long)pa - (long long)pb, (long long)(2 * R * 37 - 2 * 4 * 37 - 4) * 4,
               "peaks %zu (separate) vs %zu (fused)", pa, pb);
  free(g);
  par_gpt_destroy(a), par_gpt_destroy(b);
}
