/* Shard invariance: tensors split into k = 1, 2, 3, 7 contiguous shards, one
 * handle per simulated rank, the partial sums reduced by the test (as a
 * caller's allreduce would), must update exactly as the whole tensors do.
 *
 * Element-wise work is identical per element whatever the split; only the
 * order in which the double-precision partial sums are added changes. That
 * perturbs a norm by ~1e-16 relative, far below fp32's 6e-8, so the fp32
 * step size lr * trust rounds the same way except in rare ties, where it
 * moves by one ulp of the step -- well under an ulp of p. Over 3 steps we
 * allow 2 ulp of p and would see a wrong reduction (a shard's own norm, a
 * missing shard) as a change of ~1e-3 relative. Gradient clipping goes
 * through the same two phases (optim_grad_sumsq, optim_grad_scale). */
#include "ref.h"

#define NT 3
static const size_t sizes[NT] = {4099, 40000, 13};
#define STEPS 3

typedef struct {
  float *p, *g, *m, *v;
} arrays;

/* Runs STEPS steps of kind over the tensors split into k shards each
 * (k handles); gathers the parameters into out[NT]. */
static void run_split(int kind, int k, float *const *p0, float *const *const *grads, float **out,
                      float max_norm) {
  optim *o[8];
  arrays a[8][NT];
  optim_tensor t[8][NT];
  for (int r = 0; r < k; r++) {
    optim_config cfg = OPTIM_CONFIG_DEFAULTS;
    cfg.kind = kind;
    cfg.threads = 1 + (r & 1); /* ranks run with different thread counts */
    cr_assert_eq(optim_create(&o[r], &cfg, NULL, 0), 0);
    optim_group g = optim_group_defaults(kind);
    g.lr = kind == OPTIM_LARS ? 1.0f : 0.01f;
    g.momentum = kind == OPTIM_SGD ? 0.9f : g.momentum;
    optim_group ex = g;
    ex.adapt = 0;
    ex.weight_decay = 0;
    int id0, id1;
    cr_assert_eq(optim_add_group(o[r], &g, &id0), 0);
    cr_assert_eq(optim_add_group(o[r], &ex, &id1), 0);
    for (int i = 0; i < NT; i++) {
      size_t lo = sizes[i] * r / k, hi = sizes[i] * (r + 1) / k, n = hi - lo;
      a[r][i].p = malloc((n ? n : 1) * 4);
      a[r][i].g = malloc((n ? n : 1) * 4);
      a[r][i].m = calloc(n ? n : 1, 4);
      a[r][i].v = calloc(n ? n : 1, 4);
      memcpy(a[r][i].p, p0[i] + lo, n * 4);
      t[r][i] = (optim_tensor){.param = a[r][i].p,
                               .grad = a[r][i].g,
                               .m = a[r][i].m,
                               .v = a[r][i].v,
                               .group = i == 2 ? id1 : id0,
                               .n = n};
    }
  }
  for (int s = 0; s < STEPS; s++) {
    /* phase one of clipping: per-tensor sums, reduced over shards and tensors */
    double gsum = 0;
    for (int r = 0; r < k; r++) {
      for (int i = 0; i < NT; i++) {
        size_t lo = sizes[i] * r / k;
        memcpy(a[r][i].g, grads[s][i] + lo, t[r][i].n * 4);
      }
      double ss[NT];
      cr_assert_eq(optim_grad_sumsq(o[r], ss, t[r], NT), 0);
      for (int i = 0; i < NT; i++)
        gsum += ss[i];
    }
    float gs;
    cr_assert_eq(optim_grad_scale(gsum, 4.0f, max_norm, &gs, NULL), 0);
    /* phase one of the optimizer, the "allreduce", phase two */
    double part[8][2 * NT], red[2 * NT] = {0};
    for (int r = 0; r < k; r++) {
      cr_assert_eq(optim_partials(o[r], part[r], 2 * NT, t[r], NT, gs), 0, "%s",
                   optim_last_error(o[r]));
      for (int j = 0; j < 2 * NT; j++)
        red[j] += part[r][j];
    }
    for (int r = 0; r < k; r++)
      cr_assert_eq(optim_apply(o[r], t[r], NT, red, 2 * NT, gs), 0, "%s", optim_last_error(o[r]));
  }
  for (int r = 0; r < k; r++) {
    for (int i = 0; i < NT; i++) {
      size_t lo = sizes[i] * r / k;
      memcpy(out[i] + lo, a[r][i].p, t[r][i].n * 4);
      free(a[r][i].p);
      free(a[r][i].g);
      free(a[r][i].m);
      free(a[r][i].v);
    }
    optim_destroy(o[r]);
  }
}

static void shard_case(int kind, float max_norm) {
  rng_t rng = {31337 + (uint64_t)kind};
  float *p0[NT], *whole[NT], *split[NT];
  float *g[STEPS][NT];
  float *const *gp[STEPS];
  for (int i = 0; i < NT; i++) {
    p0[i] = malloc(sizes[i] * 4);
    whole[i] = malloc(sizes[i] * 4);
    split[i] = malloc(sizes[i] * 4);
    rng_fill(&rng, p0[i], sizes[i], 1.0);
  }
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < NT; i++) {
      g[s][i] = malloc(sizes[i] * 4);
      rng_fill(&rng, g[s][i], sizes[i], 4.0); /* loss scale 4 */
    }
    gp[s] = g[s];
  }
  run_split(kind, 1, p0, gp, whole, max_norm);
  /* the reference point must actually have moved */
  cr_assert(whole[0][0] != p0[0][0] && whole[1][7] != p0[1][7]);
  const int ks[] = {2, 3, 7};
  for (int c = 0; c < 3; c++) {
    run_split(kind, ks[c], p0, gp, split, max_norm);
    for (int i = 0; i < NT; i++) {
      char what[96];
      snprintf(what, sizeof what, "kind %d, %d shards, tensor %d", kind, ks[c], i);
      expect_ulps(split[i], whole[i], sizes[i], 2, what);
    }
  }
  for (int i = 0; i < NT; i++) {
    free(p0[i]);
    free(whole[i]);
    free(split[i]);
    for (int s = 0; s < STEPS; s++)
      free(g[s][i]);
  }
}

Test(shard, lamb) {
  shard_case(OPTIM_LAMB, 0.0f);
}
Test(shard, lamb_clipped) {
  shard_case(OPTIM_LAMB, 1.0f);
}
Test(shard, lars_clipped) {
  shard_case(OPTIM_LARS, 5.0f);
}
Test(shard, adamw_clipped) {
  shard_case(OPTIM_ADAMW, 2.0f);
}
Test(shard, sgd_clipped) {
  shard_case(OPTIM_SGD, 2.0f);
}
