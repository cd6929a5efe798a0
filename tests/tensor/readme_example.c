/* The usage example of libtensor/README.md, built so that it keeps compiling. */
#include <stdio.h>
#include <strata/tensor.h>

int main(void) {
  tensor_ctx_t *ctx = NULL;
  tensor_t x = {0}, w = {0}, y = {0};
  int64_t xs[2] = {4, 8}, ws[2] = {16, 8}, ys[2] = {4, 16};
  int rc = tensor_ctx_create(&ctx, NULL);
  if (rc) return 1;
  if ((rc = tensor_alloc(ctx, &x, TENSOR_F32, TENSOR_CPU, 2, xs)) ||
      (rc = tensor_alloc(ctx, &w, TENSOR_F32, TENSOR_CPU, 2, ws)) ||
      (rc = tensor_alloc(ctx, &y, TENSOR_F32, TENSOR_CPU, 2, ys)))
    goto done;
  /* Same values whatever shard of "fc.w" a process holds. */
  tensor_fill_normal(ctx, &x, 1, "x", NULL, 0.f, 1.f);
  tensor_fill_normal(ctx, &w, 1, "fc.w", NULL, 0.f, 0.02f);
  rc = tensor_linear_forward(ctx, &y, &x, &w, NULL); /* y = x w^T */
  if (!rc) rc = tensor_gelu_forward(ctx, &y, &y);
  /* A wrong shape is an error with a message, never a crash. */
  if (tensor_linear_forward(ctx, &y, &w, &x, NULL) == STRATA_ESHAPE)
    printf("expected error: %s\n", tensor_last_error(ctx));
  size_t peak = 0;
  tensor_memory(ctx, TENSOR_CPU, NULL, &peak);
  printf("y[0] = %f, peak host bytes %zu\n", ((float *)y.data)[0], peak);
done:
  if (rc) fprintf(stderr, "%s: %s\n", tensor_strerror(rc), tensor_last_error(ctx));
  tensor_free(ctx, &x), tensor_free(ctx, &w), tensor_free(ctx, &y);
  tensor_ctx_destroy(ctx);
  return rc ? 1 : 0;
}
