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

/* One step in parts (optim_step_begin / _end, what a caller streaming the
 * optimizer's state from an offload tier does): tensor by tensor, phase one
 * of every part before phase two, equals one call over all of them bit for
 * bit, and counts one step. Misuse is refused. */
Test(shard, step_in_parts_equals_whole) {
  const int kinds[4] = {OPTIM_ADAMW, OPTIM_LAMB, OPTIM_LARS, OPTIM_SGD};
  for (int kk = 0; kk < 4; kk++) {
    int kind = kinds[kk];
    optim *o[2];
    float *p[2][NT], *m[2][NT], *v[2][NT], *g[NT];
    optim_tensor t[2][NT];
    for (int i = 0; i < NT; i++) {
      g[i] = malloc(sizes[i] * 4);
      for (size_t j = 0; j < sizes[i]; j++) g[i][j] = (float)sin(0.37 * (double)(j + 11 * i)) * 1e-2f;
    }
    for (int w = 0; w < 2; w++) {
      optim_config cfg = OPTIM_CONFIG_DEFAULTS;
      cfg.kind = kind;
      cr_assert_eq(optim_create(&o[w], &cfg, NULL, 0), 0);
      optim_group gr = optim_group_defaults(kind);
      gr.momentum = kind == OPTIM_SGD ? 0.9f : gr.momentum;
      int id;
      cr_assert_eq(optim_add_group(o[w], &gr, &id), 0);
      for (int i = 0; i < NT; i++) {
        p[w][i] = malloc(sizes[i] * 4), m[w][i] = calloc(sizes[i], 4), v[w][i] = calloc(sizes[i], 4);
        for (size_t j = 0; j < sizes[i]; j++) p[w][i][j] = (float)cos(0.11 * (double)(j + 5 * i));
        t[w][i] = (optim_tensor){.param = p[w][i], .grad = g[i], .m = m[w][i], .v = v[w][i], .group = id, .n = sizes[i]};
      }
    }
    for (int s = 0; s < STEPS; s++) {
      cr_assert_eq(optim_step(o[0], t[0], NT, 1.0f), 0);
      double sums[2 * NT];
      cr_assert_eq(optim_step_begin(o[1]), 0);
      cr_expect_eq(optim_step_begin(o[1]), STRATA_ESTATE, "begun twice");
      for (int i = 0; i < NT; i++) cr_assert_eq(optim_partials(o[1], sums + 2 * i, 2, &t[1][i], 1, 1.0f), 0);
      for (int i = 0; i < NT; i++) cr_assert_eq(optim_apply(o[1], &t[1][i], 1, sums + 2 * i, 2, 1.0f), 0);
      cr_expect_eq(optim_get_step(o[1]), s, "counted before optim_step_end");
      cr_assert_eq(optim_step_end(o[1]), 0);
    }
    cr_expect_eq(optim_step_end(o[1]), STRATA_ESTATE, "ended without a beginning");
    cr_expect_eq(optim_get_step(o[0]), STEPS);
    cr_expect_eq(optim_get_step(o[1]), STEPS);
    for (int i = 0; i < NT; i++) {
      cr_expect(!memcmp(p[0][i], p[1][i], sizes[i] * 4), "kind %d tensor %d: parameters differ", kind, i);
      cr_expect(!memcmp(m[0][i], m[1][i], sizes[i] * 4), "kind %d tensor %d: m differs", kind, i);
    }
    for (int w = 0; w < 2; w++) {
      for (int i = 0; i < NT; i++) free(p[w][i]), free(m[w][i]), free(v[w][i]);
      optim_destroy(o[w]);
    }
    for (int i = 0; i < NT; i++) free(g[i]);
  }
}
