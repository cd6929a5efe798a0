/* Usage example of the GPT model (strata/par_gpt.h): build a small model,
 * train it with plain SGD on one batch, print the loss. Built and run by the
 * tests so that it keeps compiling and working. */
#include <math.h>
#include <stdio.h>
#include <strata/parallel.h>

int main(void) {
  par_gpt_config_t cfg = {.layers = 2, .hidden = 32, .heads = 4, .seq = 16, .vocab = 32};
  par_gpt_t *m = NULL;
  int rc = par_gpt_create(&m, &cfg, 42); /* parameters from Philox(42, view name, index) */
  if (rc) {
    fprintf(stderr, "create: %s\n", par_gpt_create_error());
    return 1;
  }
  int32_t tok[4 * 16], tgt[4 * 16];
  for (int i = 0; i < 64; i++) tok[i] = (i * 7) % 32, tgt[i] = (i * 7 + 1) % 32;
  size_t n;
  float *p = par_gpt_params(m, &n), *g = par_gpt_grads(m, NULL), loss = NAN;
  for (int step = 0; step < 100 && !rc; step++) {
    rc = par_gpt_zero_grad(m);
    if (!rc) rc = par_gpt_forward(m, tok, tgt, 4, 16, &loss);
    if (!rc) rc = par_gpt_backward(m);
    for (size_t i = 0; i < n && !rc; i++) p[i] -= 0.3f * g[i]; /* or liboptim on the flat arrays */
    if (step % 25 == 0) printf("step %3d loss %.4f\n", step, loss);
  }
  if (rc) fprintf(stderr, "step: %s\n", par_gpt_last_error(m));
  for (int i = 0; i < par_gpt_num_views(m) && i < 3; i++) {
    const par_gpt_view_t *v = par_gpt_view(m, i);
    printf("view %-16s offset %8zu shape %lld x %lld decay %d\n", v->name, v->offset,
           (long long)v->shape[0], (long long)(v->ndim > 1 ? v->shape[1] : 1), v->decay);
  }
  printf("final loss %.4f (ln V = %.4f at the start)\n", loss, log(32.0));
  par_gpt_destroy(m);
  return rc || !(loss < 0.5f) ? 1 : 0;
}
