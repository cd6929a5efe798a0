/* The serial GPT model (strata/par_gpt.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strata/parallel.h>
#include <strata/tensor.h>

#include "gpt_ref.h"

static par_gpt_config_t tiny(void) {
  par_gpt_config_t c = {.layers = 2, .hidden = 8, .heads = 2, .seq = 6, .vocab = 11, .recompute = 0};
  return c;
}

static void tokens_for(int32_t *tok, int32_t *tgt, int n, int V, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (int i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    tok[i] = (int32_t)((s >> 8) % (uint32_t)V);
    s = s * 1664525u + 1013904223u;
    tgt[i] = (int32_t)((s >> 8) % (uint32_t)V);
  }
}

Test(gpt, layout_and_views) {
  par_gpt_config_t c = tiny();
  par_gpt_t *m;
  cr_assert_eq(par_gpt_create(&m, &c, 1), 0, "%s", par_gpt_create_error());
  size_t n = 0, ng = 0;
  cr_assert_not_null(par_gpt_params(m, &n));
  par_gpt_grads(m, &ng);
  size_t h = 8, expect = 11 * h + 6 * h + 2 * (12 * h * h + 13 * h) + 2 * h;
  cr_expect_eq(n, expect);
  cr_expect_eq(ng, n);
  cr_expect_eq(par_gpt_param_count(&c), expect);
  cr_assert_eq(par_gpt_num_views(m), 4 + 12 * 2);
  size_t off = 0;
  for (int i = 0; i < par_gpt_num_views(m); i++) { /* contiguous, in order, no gaps */
    const par_gpt_view_t *v = par_gpt_view(m, i);
    cr_expect_eq(v->offset, off, "%s", v->name);
    off += v->numel;
    int bias_or_norm = strstr(v->name, ".b") == v->name + strlen(v->name) - 2 || strstr(v->name, "ln_");
    cr_expect_eq(v->decay, !bias_or_norm, "decay of %s", v->name);
  }
  cr_expect_eq(off, n);
  const par_gpt_view_t *q = par_gpt_find_view(m, "h.1.attn.qkv.w");
  cr_assert_not_null(q);
  cr_expect(q->shape[0] == 24 && q->shape[1] == 8);
  cr_expect_null(par_gpt_find_view(m, "h.2.attn.qkv.w"));
  cr_expect_null(par_gpt_view(m, 28));
  size_t cur = 0;
  cr_assert_eq(par_gpt_memory(m, &cur, NULL), 0);
  cr_expect_geq(cur, 2 * n * sizeof(float));
  par_gpt_destroy(m);
  par_gpt_destroy(NULL);
}

Test(gpt, initialisation_by_global_index) {
  par_gpt_config_t c = tiny();
  par_gpt_t *m;
  tensor_ctx_t *tc;
  cr_assert_eq(par_gpt_create(&m, &c, 77), 0);
  cr_assert_eq(tensor_ctx_create(&tc, NULL), 0);
  float *p = par_gpt_params(m, NULL);
  /* A tensor-parallel shard of h.0.mlp.fc.w (rows 8..15 of 32) filled on its
   * own equals the model's values at those rows. */
  const par_gpt_view_t *v = par_gpt_find_view(m, "h.0.mlp.fc.w");
  float shard[8 * 8];
  tensor_t t = tensor_view2(shard, TENSOR_F32, TENSOR_CPU, 8, 8);
  tensor_slice_t sl = {2, {32, 8}, {8, 0}};
  cr_assert_eq(tensor_fill_normal(tc, &t, 77, "h.0.mlp.fc.w", &sl, 0.f, 0.02f), 0);
  for (int i = 0; i < 64; i++) cr_expect_eq(shard[i], p[v->offset + 64 + i], "element %d", i);
  /* Layernorm weights 1, biases 0, residual projections smaller. */
  const par_gpt_view_t *lw = par_gpt_find_view(m, "h.1.ln_2.w"), *fb = par_gpt_find_view(m, "h.1.mlp.fc.b");
  for (size_t i = 0; i < lw->numel; i++) cr_expect_eq(p[lw->offset + i], 1.f);
  for (size_t i = 0; i < fb->numel; i++) cr_expect_eq(p[fb->offset + i], 0.f);
  /* The same seed gives the same model; another seed another one. */
  par_gpt_t *m2, *m3;
  cr_assert_eq(par_gpt_create(&m2, &c, 77), 0);
  cr_assert_eq(par_gpt_create(&m3, &c, 78), 0);
  size_t n;
  par_gpt_params(m, &n);
  cr_expect(memcmp(p, par_gpt_params(m2, NULL), n * sizeof(float)) == 0);
  cr_expect(memcmp(p, par_gpt_params(m3, NULL), n * sizeof(float)) != 0);
  par_gpt_destroy(m), par_gpt_destroy(m2), par_gpt_destroy(m3);
  tensor_ctx_destroy(tc);
}

Test(gpt, loss_at_init_is_ln_vocab) {
  /* With N(0, 0.02) weights the logits have std ~ 0.02 sqrt(h) = 0.18 at
   * h = 64, so the loss is ln V + O(var/2) = ln V + ~0.02; 0.1 is generous. */
  par_gpt_config_t c = {.layers = 2, .hidden = 64, .heads = 4, .seq = 32, .vocab = 256};
  par_gpt_t *m;
  cr_assert_eq(par_gpt_create(&m, &c, 3), 0);
  int32_t tok[4 * 32], tgt[4 * 32];
  tokens_for(tok, tgt, 4 * 32, 256, 5);
  float loss;
  cr_assert_eq(par_gpt_forward(m, tok, tgt, 4, 32, &loss), 0, "%s", par_gpt_last_error(m));
  cr_expect(fabsf(loss - logf(256.f)) < 0.1f, "loss %f vs ln V %f", loss, logf(256.f));
  /* Inference without targets: logits only. */
  float l2 = 0;
  cr_assert_eq(par_gpt_forward(m, tok, NULL, 2, 32, &l2), 0);
  cr_expect(isnan(l2));
  cr_expect_not_null(par_gpt_logits(m));
  cr_expect_eq(par_gpt_backward(m), STRATA_ESTATE);
  par_gpt_destroy(m);
}

/* The activation stores grow to the largest B*T seen and are never shrunk:
 * after forwards at 12, 3 then 24 tokens the accountant must show exactly what
 * a model whose first forward is at 24 tokens shows (a smaller forward in
 * between must not change what the later reallocation frees). */
Test(gpt, memory_follows_the_largest_batch) {
  par_gpt_config_t c = tiny();
  par_gpt_t *a, *b;
  int32_t tok[24], tgt[24];
  tokens_for(tok, tgt, 24, c.vocab, 9);
  float loss;
  size_t cur_a = 0, cur_b = 0, cur_params = 0;
  cr_assert_eq(par_gpt_create(&a, &c, 1), 0);
  cr_assert_eq(par_gpt_create(&b, &c, 1), 0);
  cr_assert_eq(par_gpt_memory(a, &cur_params, NULL), 0);
  cr_assert_eq(par_gpt_forward(a, tok, tgt, 2, 6, &loss), 0, "%s", par_gpt_last_error(a));
  cr_assert_eq(par_gpt_forward(a, tok, tgt, 1, 3, &loss), 0, "%s", par_gpt_last_error(a));
  cr_assert_eq(par_gpt_forward(a, tok, tgt, 4, 6, &loss), 0, "%s", par_gpt_last_error(a));
  cr_assert_eq(par_gpt_forward(b, tok, tgt, 4, 6, &loss), 0, "%s", par_gpt_last_error(b));
  cr_assert_eq(par_gpt_memory(a, &cur_a, NULL), 0);
  cr_assert_eq(par_gpt_memory(b, &cur_b, NULL), 0);
  cr_expect_eq(cur_a, cur_b, "after 12, 3, 24 tokens: %zu bytes; after 24 alone: %zu", cur_a, cur_b);
  cr_expect_gt(cur_b, cur_params);
  par_gpt_destroy(a);
  par_gpt_destroy(b);
}

static void check_gradients(int recompute) {
  par_gpt_config_t c = tiny();
  c.recompute = recompute;
  par_gpt_t *m;
  cr_assert_eq(par_gpt_create(&m, &c, 11), 0);
  size_t n;
  float *p = par_gpt_params(m, &n);
  /* Generic parameters (layernorm weights != 1, biases != 0, larger weights)
   * so every path carries a gradient of size O(0.01..1). */
  tensor_ctx_t *tc;
  cr_assert_eq(tensor_ctx_create(&tc, NULL), 0);
  tensor_t all = tensor_view1(p, TENSOR_F32, TENSOR_CPU, (int64_t)n);
  cr_assert_eq(tensor_fill_normal(tc, &all, 5, "generic", NULL, 0.f, 0.3f), 0);
  tensor_ctx_destroy(tc);
  int B = 2, T = 5;
  int32_t tok[10], tgt[10];
  tokens_for(tok, tgt, 10, 11, 9);
  tgt[3] = -1; /* ignored position */
  float loss;
  cr_assert_eq(par_gpt_zero_grad(m), 0);
  cr_assert_eq(par_gpt_forward(m, tok, tgt, B, T, &loss), 0, "%s", par_gpt_last_error(m));
  cr_assert_eq(par_gpt_backward(m), 0, "%s", par_gpt_last_error(m));
  const float *g = par_gpt_grads(m, NULL);
  ref_cfg_t rc = {c.layers, c.hidden, c.heads, c.seq, c.vocab};
  double *pd = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) pd[i] = p[i];
  int itok[10], itgt[10];
  for (int i = 0; i < 10; i++) itok[i] = tok[i], itgt[i] = tgt[i];
  double lref = ref_gpt_loss(&rc, pd, itok, itgt, B, T);
  cr_expect(fabs(loss - lref) < 1e-5 * (1 + fabs(lref)), "loss %f vs reference %f", loss, lref);
  /* Central differences of the double reference (h 1e-6: truncation ~1e-12,
   * rounding ~1e-10). The float model's gradients carry ~1e-7 relative error
   * per op over ~20 ops: atol 2e-6 + rtol 2e-4 leaves 10x margin, while a
   * wrong term (a missing residual, untied head, transposed view) is O(0.01). */
  double worst = 0;
  size_t worst_i = 0, nz = 0;
  for (size_t i = 0; i < n; i++) {
    double s = pd[i], hh = 1e-6;
    pd[i] = s + hh;
    double lp = ref_gpt_loss(&rc, pd, itok, itgt, B, T);
    pd[i] = s - hh;
    double lm = ref_gpt_loss(&rc, pd, itok, itgt, B, T);
    pd[i] = s;
    double fd = (lp - lm) / (2 * hh), e = fabs(g[i] - fd) / (2e-6 + 2e-4 * fabs(fd));
    nz += fabs(fd) > 1e-4;
    if (!(e <= worst)) worst = e, worst_i = i;
  }
  cr_expect(worst <= 1.0, "worst gradient error %.3g of tolerance at parameter %zu", worst, worst_i);
  cr_expect(nz > n / 2, "only %zu of %zu gradients are non-trivial", nz, n);
  /* Backward accumulates. */
  float g0 = g[7];
  cr_assert_eq(par_gpt_backward(m), 0);
  cr_expect(fabsf(g[7] - 2 * g0) <= 1e-6f + 1e-5f * fabsf(g0));
  free(pd);
  par_gpt_destroy(m);
}

Test(gpt, whole_model_gradient_check) { check_gradients(0); }
Test(gpt, whole_model_gradient_check_recompute) { check_gradients(1); }

Test(gpt, learns_a_repeated_batch) {
  /* Plain SGD on one batch of random tokens: the model has to memorise 64
   * next-token pairs; the loss must fall from ln 32 = 3.47 to near zero. */
  par_gpt_config_t c = {.layers = 2, .hidden = 32, .heads = 4, .seq = 16, .vocab = 32};
  par_gpt_t *m;
  cr_assert_eq(par_gpt_create(&m, &c, 21), 0);
  int B = 4, T = 16;
  int32_t tok[64], tgt[64];
  tokens_for(tok, tgt, 64, 32, 3);
  size_t n;
  float *p = par_gpt_params(m, &n), *g = par_gpt_grads(m, NULL), loss = 0, first = 0;
  for (int step = 0; step < 300; step++) {
    cr_assert_eq(par_gpt_zero_grad(m), 0);
    cr_assert_eq(par_gpt_forward(m, tok, tgt, B, T, &loss), 0);
    if (step == 0) first = loss;
    cr_assert_eq(par_gpt_backward(m), 0);
    for (size_t i = 0; i < n; i++) p[i] -= 0.5f * g[i];
  }
  cr_expect(fabsf(first - logf(32.f)) < 0.1f, "initial loss %f", first);
  cr_expect(loss < 0.05f, "loss after 300 SGD steps %f (from %f)", loss, first);
  par_gpt_destroy(m);
}

Test(gpt, errors_name_the_values) {
  par_gpt_config_t c = tiny();
  c.heads = 3;
  par_gpt_t *m = (par_gpt_t *)1;
  cr_expect_eq(par_gpt_create(&m, &c, 1), STRATA_EINVAL);
  cr_expect_null(m);
  cr_expect(strstr(par_gpt_create_error(), "hidden 8") && strstr(par_gpt_create_error(), "heads 3"), "%s",
            par_gpt_create_error());
  cr_expect_eq(par_gpt_param_count(&c), 0);
  c = tiny();
  cr_assert_eq(par_gpt_create(&m, &c, 1), 0);
  int32_t tok[14] = {0}, tgt[14] = {0};
  float loss;
  cr_expect_eq(par_gpt_forward(m, tok, tgt, 2, 7, &loss), STRATA_EINVAL, "T 7 > seq 6");
  cr_expect(strstr(par_gpt_last_error(m), "T 7") != NULL, "%s", par_gpt_last_error(m));
  tok[5] = 11;
  cr_expect_eq(par_gpt_forward(m, tok, tgt, 2, 6, &loss), STRATA_EINVAL);
  cr_expect(strstr(par_gpt_last_error(m), "tokens[5] = 11") != NULL, "%s", par_gpt_last_error(m));
  cr_expect_eq(par_gpt_backward(m), STRATA_ESTATE);
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  o.device = 0;
  par_gpt_t *g = NULL;
  if (tensor_cuda_device_count() == 0) cr_expect_neq(par_gpt_create_ex(&g, &c, &o, 1), 0);
  par_gpt_destroy(g);
  par_gpt_destroy(m);
}

Test(gpt, memory_accounting_and_recompute) {
  /* Parameters and gradients are exactly 2 N floats; activations come on top
   * at the first forward; recompute keeps one block's activations instead of
   * L, and gives the same loss. */
  par_gpt_config_t c = {.layers = 4, .hidden = 32, .heads = 4, .seq = 16, .vocab = 64};
  size_t N = par_gpt_param_count(&c), cur0, cur1, cur2;
  float l1, l2;
  int32_t tok[64], tgt[64];
  tokens_for(tok, tgt, 64, 64, 4);
  par_gpt_t *a, *b;
  cr_assert_eq(par_gpt_create(&a, &c, 1), 0);
  cr_assert_eq(par_gpt_memory(a, &cur0, NULL), 0);
  cr_expect_eq(cur0, 2 * N * sizeof(float));
  cr_assert_eq(par_gpt_forward(a, tok, tgt, 4, 16, &l1), 0);
  par_gpt_memory(a, &cur1, NULL);
  c.recompute = 1;
  cr_assert_eq(par_gpt_create(&b, &c, 1), 0);
  cr_assert_eq(par_gpt_forward(b, tok, tgt, 4, 16, &l2), 0);
  par_gpt_memory(b, &cur2, NULL);
  /* per block: 15 h + 4 + heads floats per token (ln1, qkv, attention out,
   * residual, ln2, fc, gelu, row statistics, log-sum-exp) */
  size_t per_block = (15 * 32 + 4 + 4) * 64 * sizeof(float);
  cr_expect_eq(cur1 - cur2, 3 * per_block, "saved %zu bytes, expected %zu", cur1 - cur2, 3 * per_block);
  cr_expect_eq(l1, l2);
  par_gpt_destroy(a), par_gpt_destroy(b);
}
