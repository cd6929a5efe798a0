/* Generation (strata/par_gpt.h): the KV cache gives the logits of a full
 * forward at every position, token by token and after a prefilled prompt;
 * sampling is greedy at temperature 0 and a function of (seed, step). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <strata/par_gpt.h>

#define V 64
#define N 20

static par_gpt_t *small_model(int recompute) {
  par_gpt_config_t c = {.layers = 2, .hidden = 32, .heads = 4, .seq = 32, .vocab = V, .recompute = recompute};
  par_gpt_t *m = NULL;
  cr_assert_eq(par_gpt_create(&m, &c, 11), 0, "%s", par_gpt_create_error());
  return m;
}

/* fp32 logits of order one, computed with sums in another order (one row
 * of GEMMs, attention over the cache instead of the fused kernel): they
 * agree to a few units of float32's 6e-8 relative rounding per operation
 * over about 2 * hidden terms; 2e-5 absolute leaves a margin of ~10. */
static void close_rows(const float *a, const float *b, int row) {
  for (int v = 0; v < V; v++)
    cr_assert(fabsf(a[v] - b[v]) <= 2e-5f + 2e-5f * fabsf(b[v]), "position %d logit %d: %.8g vs %.8g", row, v,
              a[v], b[v]);
}

static void check_cache(int recompute, int prefill) {
  par_gpt_t *m = small_model(recompute);
  int32_t tok[N];
  for (int i = 0; i < N; i++) tok[i] = (i * 37 + 5) % V;
  cr_assert_eq(par_gpt_forward(m, tok, NULL, 1, N, NULL), 0);
  float *full = malloc(sizeof(float) * N * V), logits[V];
  memcpy(full, par_gpt_logits(m), sizeof(float) * N * V);
  par_gpt_kv_t *kv;
  cr_assert_eq(par_gpt_kv_create(&kv, m, 32), 0, "%s", par_gpt_last_error(m));
  int start = 0;
  if (prefill) {
    cr_assert_eq(par_gpt_kv_append(kv, tok, prefill, logits), 0, "%s", par_gpt_last_error(m));
    close_rows(logits, full + (prefill - 1) * V, prefill - 1);
    start = prefill;
  }
  for (int i = start; i < N; i++) {
    cr_assert_eq(par_gpt_kv_append(kv, &tok[i], 1, logits), 0, "%s", par_gpt_last_error(m));
    close_rows(logits, full + i * V, i);
  }
  cr_assert_eq(par_gpt_kv_len(kv), N);
  /* beyond the cache: refused */
  par_gpt_kv_t *tiny;
  cr_assert_eq(par_gpt_kv_create(&tiny, m, 2), 0);
  cr_assert_eq(par_gpt_kv_append(tiny, tok, 3, NULL), STRATA_EINVAL);
  par_gpt_kv_destroy(tiny);
  par_gpt_kv_destroy(kv);
  free(full);
  par_gpt_destroy(m);
}

Test(generate, cache_token_by_token) { check_cache(0, 0); }
Test(generate, cache_after_prefill) { check_cache(0, 7); }
Test(generate, cache_with_recompute) { check_cache(1, 7); } /* prefilled one token at a time */

Test(generate, greedy_and_seeded) {
  float lg[V];
  for (int v = 0; v < V; v++) lg[v] = sinf((float)v);
  lg[17] = lg[42] = 3.f; /* a tie: the first wins */
  par_sample_options_t g = {.temperature = 0, .top_k = 0, .seed = 5};
  int32_t t;
  for (uint64_t s = 0; s < 5; s++) {
    cr_assert_eq(par_gpt_sample(lg, V, &g, s, &t), 0);
    cr_assert_eq(t, 17);
  }
  par_sample_options_t k1 = {.temperature = 1.5, .top_k = 1, .seed = 5};
  cr_assert_eq(par_gpt_sample(lg, V, &k1, 3, &t), 0);
  cr_assert_eq(t, 17);
  /* the same (seed, step) gives the same token; the seed matters */
  par_sample_options_t a = {.temperature = 1.0, .top_k = 0, .seed = 1}, b = a;
  b.seed = 2;
  int same = 1, differ = 0;
  for (uint64_t s = 0; s < 64; s++) {
    int32_t x, y, z;
    par_gpt_sample(lg, V, &a, s, &x);
    par_gpt_sample(lg, V, &a, s, &y);
    par_gpt_sample(lg, V, &b, s, &z);
    same &= x == y;
    differ |= x != z;
  }
  cr_assert(same && differ);
}

/* The draws follow softmax(logits / T) over the top k: a chi-square test on
 * 20000 draws over 4 outcomes (3 degrees of freedom; 16.3 is the 0.999
 * quantile, so a correct sampler fails one run in a thousand at most, and
 * the test's draws are fixed by the seed). */
Test(generate, distribution) {
  float lg[V];
  for (int v = 0; v < V; v++) lg[v] = -10.f - v;
  lg[3] = 1.f, lg[9] = 0.f, lg[20] = -0.5f, lg[30] = -1.f; /* the top 4 */
  par_sample_options_t o = {.temperature = 0.7, .top_k = 4, .seed = 9};
  double p[4], z = 0, vals[4] = {1, 0, -0.5, -1};
  for (int i = 0; i < 4; i++) z += (p[i] = exp(vals[i] / 0.7));
  int count[4] = {0}, idx[4] = {3, 9, 20, 30}, other = 0, n = 20000;
  for (int s = 0; s < n; s++) {
    int32_t t;
    par_gpt_sample(lg, V, &o, (uint64_t)s, &t);
    int k = -1;
    for (int i = 0; i < 4; i++)
      if (t == idx[i]) k = i;
    if (k < 0) other++;
    else count[k]++;
  }
  cr_assert_eq(other, 0, "a token outside the top 4 was drawn");
  double chi = 0;
  for (int i = 0; i < 4; i++) {
    double e = n * p[i] / z;
    chi += (count[i] - e) * (count[i] - e) / e;
  }
  cr_assert(chi < 16.3, "chi-square %.2f (counts %d %d %d %d)", chi, count[0], count[1], count[2], count[3]);
}
