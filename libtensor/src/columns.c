/* tensor_copy_columns: a block of columns between row-major tensors, the
 * strided copy that splits packed q|k|v rows (ring self-attention) and adds
 * their gradients back. */
#include <string.h>

#include "tensor_internal.h"
#if defined(STRATA_CUDA)
#include "tensor_cuda.h"
#endif

int tensor_copy_columns(tensor_ctx_t *ctx, tensor_t *dst, int64_t d0, const tensor_t *src, int64_t s0, int64_t n,
                        int accumulate) {
  int rc = STRATA_OK;
  const char *fn = "tensor_copy_columns";
  char a[96], b[96];
  if (!ctx) return STRATA_EINVAL;
  TRY(tensor_check(ctx, fn, "dst", dst, TENSOR_F32, 1, 4));
  TRY(tensor_check(ctx, fn, "src", src, TENSOR_F32, 1, 4));
  TRY(tensor_check_device(ctx, fn, "src", src, dst->device));
  int64_t Wd = dst->shape[dst->ndim - 1], Ws = src->shape[src->ndim - 1];
  int64_t rows = Wd ? tensor_numel(dst) / Wd : 0, srows = Ws ? tensor_numel(src) / Ws : 0;
  CHECK(rows == srows, STRATA_ESHAPE, "%s: dst %s and src %s differ in rows (%lld, %lld)", fn,
        tensor_describe(dst, a, sizeof a), tensor_describe(src, b, sizeof b), (long long)rows, (long long)srows);
  CHECK(n >= 0 && d0 >= 0 && s0 >= 0 && d0 + n <= Wd && s0 + n <= Ws, STRATA_ESHAPE,
        "%s: columns [%lld, %lld) of dst (width %lld) or [%lld, %lld) of src (width %lld) out of range", fn,
        (long long)d0, (long long)(d0 + n), (long long)Wd, (long long)s0, (long long)(s0 + n), (long long)Ws);
  if (n == 0 || rows == 0) goto fail;
  if (dst->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_copy_columns(ctx, dst->data, Wd, d0, src->data, Ws, s0, n, rows, accumulate));
#else
    CHECK(0, STRATA_EUNSUPPORTED, "%s: CUDA tensors in a build without CUDA", fn);
#endif
    goto fail;
  }
  float *d = dst->data;
  const float *s = src->data;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (rows * n > 65536)
  for (int64_t r = 0; r < rows; r++) {
    float *x = d + r * Wd + d0;
    const float *y = s + r * Ws + s0;
    if (accumulate)
      for (int64_t c = 0; c < n; c++) x[c] += y[c];
    else
      memcpy(x, y, (size_t)n * sizeof *x);
  }
fail:
  return rc;
}
