/* A program that uses liboptim and nothing else of strata: least squares
 * min_x 0.5 ||A x - y||^2 split into two "layers", trained with LAMB through
 * the two-phase API (here one process, so the "reduction" is the identity),
 * global-norm clipping and a dynamic loss scaler, with a bf16 copy of the
 * parameters written in the update. Exits 0 when the loss fell 100-fold.
 * README.md shows a shorter program that the installed package builds;
 * tests/optim/consumer.sh builds this one with a plain
 * `cc ... libstrata_optim.a -fopenmp -lm` to prove liboptim links alone. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <strata/optim.h>

#define N 64 /* parameters: layer 0 holds 48 weights, layer 1 16 "biases" */
#define M 96 /* equations */

static float A[M][N], y[M];

/* loss and gradient (times scale, as an fp16 backward would produce) */
static double loss_grad(const float *x, float *g, float scale) {
  double loss = 0;
  for (int j = 0; j < N; j++)
    g[j] = 0;
  for (int i = 0; i < M; i++) {
    double r = -y[i];
    for (int j = 0; j < N; j++)
      r += A[i][j] * x[j];
    loss += 0.5 * r * r;
    for (int j = 0; j < N; j++)
      g[j] += (float)(scale * r * A[i][j]);
  }
  return loss;
}

int main(void) {
  optim *opt = NULL;
  optim_scaler *scaler = NULL;
  char err[256];
  int rc = 1, w, b, skip;
  float x[N] = {0}, g[N], m[N] = {0}, v[N] = {0};
  uint16_t x_bf16[N];
  uint32_t s = 1;
  for (int i = 0; i < M; i++) { /* y = A x* with x*_j = sin(j): a loss of 0 is reachable */
    y[i] = 0;
    for (int j = 0; j < N; j++) {
      s = s * 1664525u + 1013904223u;
      A[i][j] = (float)((s >> 8) / 16777216.0 - 0.5);
      y[i] += A[i][j] * (float)sin(j);
    }
  }

  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = OPTIM_LAMB;
  if (optim_create(&opt, &cfg, err, sizeof err) != STRATA_OK) {
    fprintf(stderr, "optim_create: %s\n", err);
    goto done;
  }
  optim_group hp = optim_group_defaults(OPTIM_LAMB);
  hp.lr = 0.05f;
  hp.weight_decay = 0.0f;
  optim_group biases = hp; /* biases: no decay, no layer adaptation */
  biases.adapt = 0;
  optim_schedule sched = {OPTIM_SCHED_COSINE, 20, 600, 1.0, 0.01};
  if (optim_add_group(opt, &hp, &w) || optim_add_group(opt, &biases, &b) ||
      optim_set_schedule(opt, &sched) || optim_scaler_create(&scaler, NULL, err, sizeof err)) {
    fprintf(stderr, "set-up: %s %s\n", optim_last_error(opt), err);
    goto done;
  }
  optim_tensor t[2] = {{.param = x,
                        .grad = g,
                        .m = m,
                        .v = v,
                        .lowp = x_bf16,
                        .lowp_dtype = OPTIM_LOWP_BF16,
                        .group = w,
                        .n = 48},
                       {.param = x + 48,
                        .grad = g + 48,
                        .m = m + 48,
                        .v = v + 48,
                        .lowp = x_bf16 + 48,
                        .lowp_dtype = OPTIM_LOWP_BF16,
                        .group = b,
                        .n = 16}};

  double first = -1, last = 0, sumsq[2], sums[2 * OPTIM_NSUMS];
  for (int it = 0; it < 600; it++) {
    float scale = optim_scaler_scale(scaler), gs;
    last = loss_grad(x, g, scale);
    if (first < 0) first = last;
    /* clipping, phase one; a multi-process caller would allreduce here */
    if (optim_grad_sumsq(opt, sumsq, t, 2)) goto fail;
    double total = sumsq[0] + sumsq[1];
    if (optim_scaler_update(scaler, !isfinite(total), &skip)) goto fail;
    if (skip) continue; /* overflow: the scaler shrank, try again */
    if (optim_grad_scale(total, scale, 1.0f, &gs, NULL)) goto fail;
    /* LAMB, phase one; again the caller would allreduce sums here */
    if (optim_partials(opt, sums, 2 * OPTIM_NSUMS, t, 2, gs)) goto fail;
    if (optim_apply(opt, t, 2, sums, 2 * OPTIM_NSUMS, gs)) goto fail;
  }
  printf("consumer: loss %.6g -> %.6g after %ld steps (%ld skipped), x[0] = %g (bf16 %#06x)\n",
         first, last, optim_get_step(opt), optim_scaler_skipped(scaler), (double)x[0], x_bf16[0]);
  rc = last < first / 100 ? 0 : 1;
  goto done;
fail:
  fprintf(stderr, "consumer: %s\n", optim_last_error(opt));
done:
  optim_scaler_destroy(scaler);
  optim_destroy(opt);
  return rc;
}
