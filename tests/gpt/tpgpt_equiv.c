/* The GPT model under 2D, 2.5D and 3D tensor parallelism
 * (par_gpt_options_t.tp_mode) against the serial model (mpirun -np N
 * tpgpt_equiv MODE [DEPTH]: 1 with 2d, 4 with 2d, 8 with "2.5d 2" and 3d):
 * the same configuration and seed on every rank, the serial model whole,
 * the parallel one over all ranks. Checked:
 *   - every view is the block of the serial tensor that its par_gpt_block_t
 *     names, exactly (initialisation by global index);
 *   - the loss of a batch equals the serial loss within 1e-5 relative, and
 *     every view's gradient its block of the serial gradient within 5e-5 of
 *     the view's largest element: the sums differ from the serial model's in
 *     their order only (blocked products, row statistics and logits summed
 *     over ranks), a few ulp of the O(1e-2) sums per step of 2 layers, and
 *     a misplaced block, a gradient not summed over its replicas or summed
 *     twice moves them by O(1);
 *   - after two SGD steps on the views, the next loss still equals the
 *     serial one's (the replicas stay equal);
 *   - a batch that does not divide over the row blocks is refused by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/parallel.h>

#include "gpt/mpi_check.h"

static const par_gpt_config_t mc = {.layers = 2, .hidden = 32, .heads = 4, .seq = 16, .vocab = 64};
enum { B = 4, T = 16 };

/* The element of the serial tensor (global layout) that local element i of
 * block view v holds. */
static int64_t serial_at(const par_gpt_view_t *v, int64_t i) {
  const par_gpt_block_t *b = &v->block;
  int64_t cols = v->ndim > 1 ? v->shape[1] : 1, G = v->ndim > 1 ? v->global[1] : 1, r = i / cols, c = i % cols;
  int64_t pr = v->shape[0] / b->parts, row = (r / pr) * b->part_rows + b->row0 + r % pr;
  return row * G + b->col0 + c;
}

/* Every view of m against its block of the serial model's array (params
 * or grads): exact, or within tol of the block's largest element. */
static void compare(const char *what, par_gpt_t *m, const float *mine, par_gpt_t *s, const float *serial, double tol) {
  for (int k = 0; k < par_gpt_num_views(m); k++) {
    const par_gpt_view_t *v = par_gpt_view(m, k), *sv = par_gpt_find_view(s, v->name);
    CHECK(v->split == PAR_GPT_SPLIT_BLOCK && sv, "%s: view %s is not a block", what, v->name);
    if (!sv) continue;
    double big = 0;
    for (size_t i = 0; i < v->numel; i++) big = fmax(big, fabs(serial[sv->offset + serial_at(v, (int64_t)i)]));
    for (size_t i = 0; i < v->numel; i++) {
      double want = serial[sv->offset + serial_at(v, (int64_t)i)], got = mine[v->offset + i];
      if (tol == 0 ? got != want : fabs(got - want) > tol * fmax(big, 1e-6)) {
        CHECK(0, "%s %s[%zu]: %g, the serial model's %g (largest %g)", what, v->name, i, got, want, big);
        break;
      }
    }
  }
}

int main(int argc, char **argv) {
  comm_t *world;
  tensor_ctx_t *tc;
  check_start("tpgpt_equiv", &world, &tc);
  const char *ms = argc > 1 ? argv[1] : "2d";
  int mode = !strcmp(ms, "3d") ? PAR_TP_3D : !strcmp(ms, "2.5d") ? PAR_TP_2P5D : PAR_TP_2D;
  int depth = argc > 2 ? atoi(argv[2]) : 1;
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  o.threads = 1;
  par_gpt_t *s = NULL, *m = NULL;
  if (par_gpt_create_ex(&s, &mc, &o, 11)) {
    fprintf(stderr, "serial: %s\n", par_gpt_create_error());
    return 1;
  }
  o.tp = world, o.tp_mode = mode, o.tp_depth = depth;
  if (par_gpt_create_ex(&m, &mc, &o, 11)) {
    fprintf(stderr, "tpgpt_equiv np=%d: %s\n", ranks, par_gpt_create_error());
    return 1;
  }
  compare("initial", m, par_gpt_params(m, NULL), s, par_gpt_params(s, NULL), 0);
  int32_t tok[B * T], tgt[B * T];
  for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + 3) % mc.vocab, tgt[i] = i % 5 == 4 ? -1 : (i * 11 + 1) % mc.vocab;
  for (int step = 0; step < 3; step++) {
    float ls, lm;
    par_gpt_zero_grad(s), par_gpt_zero_grad(m);
    CHECK(par_gpt_forward(s, tok, tgt, B, T, &ls) == 0 && par_gpt_backward(s) == 0, "serial: %s", par_gpt_last_error(s));
    CHECK(par_gpt_forward(m, tok, tgt, B, T, &lm) == 0 && par_gpt_backward(m) == 0, "parallel: %s", par_gpt_last_error(m));
    CHECK(fabs(lm - ls) <= 1e-5 * fabs(ls), "step %d: loss %.8g, the serial model's %.8g", step, lm, ls);
    if (step == 0) compare("gradient", m, par_gpt_grads(m, NULL), s, par_gpt_grads(s, NULL), 5e-5);
    /* SGD on both (the replicas must stay equal for the next loss to match) */
    size_t ns, nm;
    float *ps = par_gpt_params(s, &ns), *gs = par_gpt_grads(s, NULL), *pm = par_gpt_params(m, &nm),
          *gm = par_gpt_grads(m, NULL);
    for (size_t i = 0; i < ns; i++) ps[i] -= 0.5f * gs[i];
    for (size_t i = 0; i < nm; i++) pm[i] -= 0.5f * gm[i];
    if (rank == 0 && step == 2) printf("tpgpt_equiv np=%d %s: losses %.6f / %.6f after two steps\n", ranks, ms, lm, ls);
  }
  float l;
  int q = mode == PAR_TP_3D ? (int)lround(cbrt(ranks)) : (int)lround(sqrt(ranks / depth));
  if (q > 1) { /* one sequence a row block too few */
    CHECK(par_gpt_forward(m, tok, tgt, mode == PAR_TP_3D ? q * q - 1 : q * depth - 1, T, &l) == STRATA_EINVAL &&
              strstr(par_gpt_last_error(m), "sequences"),
          "a batch not dividing over the row blocks: %s", par_gpt_last_error(m));
  }
  par_gpt_destroy(m), par_gpt_destroy(s);
  return check_finish(world, tc);
}
