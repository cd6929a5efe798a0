/* GEMMs: matmul (batched, transposes) and the linear layer. The CPU path cuts
 * each GEMM into one block per OpenMP thread and runs single-threaded OpenBLAS
 * on every block, so the cores have one owner (see strata/tensor.h). */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "tensor_internal.h"

static void sgemm1(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void tensor_sgemm(const tensor_ctx_t *ctx, int ta, int tb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  int nt = ctx ? ctx->threads : 1;
  if (M <= 0 || N <= 0) return;
  if (nt <= 1 || omp_in_parallel() || 2.0 * M * N * K < 4e6) {
    sgemm1(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  /* One block per thread: every block packs the whole other operand again,
   * so more blocks than threads (to even out a thread slowed by a noisy
   * neighbour) cost more than they save: measured on the GPT-2 124M and
   * byte-level training steps, 4 blocks a thread took 1-4% more CPU time than
   * 1, on a loaded machine as on a quiet one. */
  int split_n = N >= M, dim = split_n ? N : M, nblk = nt;
  int align = split_n ? 16 : 8, chunk = ((dim + nblk - 1) / nblk + align - 1) / align * align;
  nblk = (dim + chunk - 1) / chunk;
#pragma omp parallel for num_threads(nt) schedule(static, 1)
  for (int blk = 0; blk < nblk; blk++) {
    int d0 = blk * chunk, d1 = d0 + chunk > dim ? dim : d0 + chunk;
    if (split_n) /* columns of C: a block of op(B)'s columns */
      sgemm1(ta, tb, M, d1 - d0, K, alpha, A, lda, tb ? B + (size_t)d0 * ldb : B + d0, ldb, beta,
             C + d0, ldc);
    else /* rows of C: a block of op(A)'s rows */
      sgemm1(ta, tb, d1 - d0, N, K, alpha, ta ? A + d0 : A + (size_t)d0 * lda, lda, B, ldb, beta,
             C + (size_t)d0 * ldc, ldc);
  }
}

/* One operand of a (possibly batched) GEMM: rows x cols matrices, `batched`
 * or shared by every batch entry. */
typedef struct {
  void *p;
  tensor_dtype_t dt;
  int rows, cols;
  int batched;
} operand_t;

static operand_t operand(const tensor_t *t, int64_t batch) {
  operand_t o;
  o.p = t->data;
  o.dt = t->dtype;
  o.rows = (int)t->shape[t->ndim - 2];
  o.cols = (int)t->shape[t->ndim - 1];
  o.batched = batch > 1 && t->ndim > 2 && tensor_prod(t, t->ndim - 2) > 1;
  return o;
}

/* out (+)= alpha op(x) op(y) over `batch` entries. A shared `out` sums over the batch. */
static int gemm_core(tensor_ctx_t *ctx, int device, operand_t out, operand_t x, operand_t y, int tx,
                     int ty, float alpha, float beta, int batch) {
  int M = tx ? x.cols : x.rows, K = tx ? x.rows : x.cols, N = ty ? y.rows : y.cols;
  int64_t sx = x.batched ? (int64_t)x.rows * x.cols : 0, sy = y.batched ? (int64_t)y.rows * y.cols : 0;
  int64_t so = out.batched ? (int64_t)out.rows * out.cols : 0;
  if (batch <= 1) sx = sy = so = 0;
  /* Fold the batch into one GEMM where the memory allows it. */
  if (batch > 1 && !out.batched && x.batched && y.batched && tx && !ty) {
    K *= batch; /* sum_i X_i^T Y_i = X^T Y with the batches stacked along K */
    batch = 1;
  } else if (batch > 1 && out.batched && x.batched && !y.batched && !tx) {
    M *= batch; /* shared right operand: stack the batches along M */
    batch = 1;
  }
  if (device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    if (batch > 1 && !out.batched) { /* shared output: accumulate entry by entry */
      int rc = STRATA_OK;
      for (int i = 0; i < batch && rc == STRATA_OK; i++)
        rc = tcu_gemm(ctx, tx, ty, M, N, K, alpha,
                      (const char *)x.p + i * sx * tensor_dtype_size(x.dt), (int)x.dt, x.cols, 0,
                      (const char *)y.p + i * sy * tensor_dtype_size(y.dt), (int)y.dt, y.cols, 0,
                      i ? 1.f : beta, out.p, (int)out.dt, out.cols, 0, 1);
      return rc;
    }
    return tcu_gemm(ctx, tx, ty, M, N, K, alpha, x.p, (int)x.dt, x.cols, sx, y.p, (int)y.dt, y.cols,
                    sy, beta, out.p, (int)out.dt, out.cols, so, batch);
#else
    return STRATA_EUNSUPPORTED;
#endif
  }
  const float *X = x.p, *Y = y.p;
  float *O = out.p;
  if (batch <= 1) {
    tensor_sgemm(ctx, tx, ty, M, N, K, alpha, X, x.cols, Y, y.cols, beta, O, out.cols);
  } else if (!out.batched) {
    for (int i = 0; i < batch; i++)
      tensor_sgemm(ctx, tx, ty, M, N, K, alpha, X + i * sx, x.cols, Y + i * sy, y.cols,
                   i ? 1.f : beta, O, out.cols);
  } else if (batch >= ctx->threads) {
#pragma omp parallel for num_threads(ctx->threads) schedule(static)
    for (int i = 0; i < batch; i++)
      sgemm1(tx, ty, M, N, K, alpha, X + i * sx, x.cols, Y + i * sy, y.cols, beta, O + i * so, out.cols);
  } else {
    for (int i = 0; i < batch; i++)
      tensor_sgemm(ctx, tx, ty, M, N, K, alpha, X + i * sx, x.cols, Y + i * sy, y.cols, beta,
                   O + i * so, out.cols);
  }
  return STRATA_OK;
}

/* Validates a matmul's operands and returns M, N, K and the batch size. */
static int check_mm(tensor_ctx_t *ctx, const char *fn, const tensor_t *c, const tensor_t *a,
                    const tensor_t *b, int ta, int tb, int *batch) {
  int rc = STRATA_OK;
  char da[96], db[96], dc[96];
  tensor_dtype_t in_dt = a && (a->dtype == TENSOR_BF16 || a->dtype == TENSOR_F16) ? a->dtype : TENSOR_F32;
  TRY(tensor_check(ctx, fn, "c", c, TENSOR_F32, 2, 4));
  TRY(tensor_check(ctx, fn, "a", a, in_dt, 2, 4));
  TRY(tensor_check(ctx, fn, "b", b, in_dt, 2, 4));
  TRY(tensor_check_device(ctx, fn, "a", a, c->device));
  TRY(tensor_check_device(ctx, fn, "b", b, c->device));
  CHECK(in_dt == TENSOR_F32 || c->device != TENSOR_CPU, STRATA_EUNSUPPORTED,
        "%s: 16-bit operands need a CUDA device (a %s); cast to f32 on the CPU", fn,
        tensor_describe(a, da, sizeof da));
  int M = ta ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2];
  int K = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
  int Kb = tb ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
  int N = tb ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
  int ok = K == Kb && c->shape[c->ndim - 2] == M && c->shape[c->ndim - 1] == N && c->ndim == a->ndim;
  for (int i = 0; ok && i < a->ndim - 2; i++) ok = a->shape[i] == c->shape[i];
  if (ok && b->ndim > 2) {
    ok = b->ndim == a->ndim;
    for (int i = 0; ok && i < b->ndim - 2; i++) ok = b->shape[i] == a->shape[i];
  }
  CHECK(ok, STRATA_ESHAPE, "%s: c %s != op(a %s%s) op(b %s%s)", fn, tensor_describe(c, dc, sizeof dc),
        tensor_describe(a, da, sizeof da), ta ? "^T" : "", tensor_describe(b, db, sizeof db),
        tb ? "^T" : "");
  *batch = (int)tensor_prod(a, a->ndim - 2);
fail:
  return rc;
}

int tensor_matmul(tensor_ctx_t *ctx, tensor_t *c, const tensor_t *a, const tensor_t *b, int trans_a,
                  int trans_b, float alpha, float beta) {
  int rc = STRATA_OK, batch = 1;
  if (!ctx) return STRATA_EINVAL;
  TRY(check_mm(ctx, "tensor_matmul", c, a, b, trans_a, trans_b, &batch));
  rc = gemm_core(ctx, c->device, operand(c, batch), operand(a, batch), operand(b, batch), trans_a,
                 trans_b, alpha, beta, batch);
fail:
  return rc;
}

int tensor_matmul_backward(tensor_ctx_t *ctx, tensor_t *da, tensor_t *db, const tensor_t *dc,
                           const tensor_t *a, const tensor_t *b, int ta, int tb) {
  int rc = STRATA_OK, batch = 1;
  char s1[96], s2[96];
  const char *fn = "tensor_matmul_backward";
  if (!ctx) return STRATA_EINVAL;
  TRY(check_mm(ctx, fn, dc, a, b, ta, tb, &batch));
  CHECK(a->dtype == TENSOR_F32, STRATA_EUNSUPPORTED, "%s: backward needs f32 operands", fn);
  if (da) {
    TRY(tensor_check(ctx, fn, "da", da, TENSOR_F32, 2, 4));
    TRY(tensor_check_device(ctx, fn, "da", da, dc->device));
    CHECK(tensor_same_shape(da, a), STRATA_ESHAPE, "%s: da %s must have a's shape %s", fn,
          tensor_describe(da, s1, sizeof s1), tensor_describe(a, s2, sizeof s2));
  }
  if (db) {
    TRY(tensor_check(ctx, fn, "db", db, TENSOR_F32, 2, 4));
    TRY(tensor_check_device(ctx, fn, "db", db, dc->device));
    CHECK(tensor_same_shape(db, b), STRATA_ESHAPE, "%s: db %s must have b's shape %s", fn,
          tensor_describe(db, s1, sizeof s1), tensor_describe(b, s2, sizeof s2));
  }
  operand_t oa = operand(a, batch), ob = operand(b, batch), oc = operand(dc, batch);
  int dev = dc->device;
  if (da) {
    operand_t g = operand(da, batch);
    if (!ta) /* dA = dC op(B)^T */
      TRY(gemm_core(ctx, dev, g, oc, ob, 0, !tb, 1.f, 1.f, batch));
    else /* A^T: dA = op(B) dC^T */
      TRY(gemm_core(ctx, dev, g, ob, oc, tb, 1, 1.f, 1.f, batch));
  }
  if (db) {
    operand_t g = operand(db, batch);
    if (!tb) /* dB = op(A)^T dC */
      TRY(gemm_core(ctx, dev, g, oa, oc, !ta, 0, 1.f, 1.f, batch));
    else /* B^T: dB = dC^T op(A) */
      TRY(gemm_core(ctx, dev, g, oc, oa, 1, ta, 1.f, 1.f, batch));
  }
fail:
  return rc;
}

/* ---- bias and linear ---- */

/* dbias(N) += sum over rows of dout(rows, N): threads take column blocks. */
static void bias_grad_cpu(const tensor_ctx_t *ctx, float *dbias, const float *dout, int64_t rows,
                          int N) {
  int nblk = (N + 63) / 64;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (rows * N > 32768)
  for (int blk = 0; blk < nblk; blk++) {
    int j0 = blk * 64, j1 = j0 + 64 > N ? N : j0 + 64;
    float acc[64] = {0};
    for (int64_t r = 0; r < rows; r++) {
      const float *d = dout + r * N;
      for (int j = j0; j < j1; j++) acc[j - j0] += d[j];
    }
    for (int j = j0; j < j1; j++) dbias[j] += acc[j - j0];
  }
}

int tensor_linear_check(tensor_ctx_t *ctx, const char *fn, const tensor_t *out, const tensor_t *in,
                        const tensor_t *weight, const tensor_t *bias, int64_t *rows_out, int *N_out, int *K_out) {
  int rc = STRATA_OK;
  char s1[96], s2[96], s3[96];
  TRY(tensor_check_act(ctx, fn, "in", in, tensor_act_dtype(in), 1, 4));
  /* 16-bit in: out of in's dtype or f32, weight of in's dtype or f32 (rounded to in's) */
  TRY(tensor_check_act(ctx, fn, "out", out, out && out->dtype == in->dtype ? in->dtype : TENSOR_F32, 1, 4));
  TRY(tensor_check(ctx, fn, "weight", weight, weight && weight->dtype == in->dtype ? in->dtype : TENSOR_F32, 2, 2));
  TRY(tensor_check_device(ctx, fn, "in", in, out->device));
  TRY(tensor_check_device(ctx, fn, "weight", weight, out->device));
  int K = (int)in->shape[in->ndim - 1], N = (int)out->shape[out->ndim - 1];
  int64_t rows = tensor_numel(in) / K;
  CHECK(weight->shape[0] == N && weight->shape[1] == K && tensor_numel(out) / N == rows &&
            out->ndim == in->ndim,
        STRATA_ESHAPE, "%s: out %s != in %s x weight %s^T", fn, tensor_describe(out, s1, sizeof s1),
        tensor_describe(in, s2, sizeof s2), tensor_describe(weight, s3, sizeof s3));
  if (bias) {
    TRY(tensor_check(ctx, fn, "bias", bias, TENSOR_F32, 1, 1));
    TRY(tensor_check_device(ctx, fn, "bias", bias, out->device));
    CHECK(bias->shape[0] == N, STRATA_ESHAPE, "%s: bias %s, expected %d outputs", fn,
          tensor_describe(bias, s1, sizeof s1), N);
  }
  *rows_out = rows, *N_out = N, *K_out = K;
fail:
  return rc;
}

int tensor_linear_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *in,
                          const tensor_t *weight, const tensor_t *bias) {
  int rc = STRATA_OK, N = 0, K = 0;
  int64_t rows = 0;
  if (!ctx) return STRATA_EINVAL;
  TRY(tensor_linear_check(ctx, "tensor_linear_forward", out, in, weight, bias, &rows, &N, &K));
  operand_t o = {out->data, out->dtype, (int)rows, N, 0}, x = {in->data, in->dtype, (int)rows, K, 0};
  operand_t w = {weight->data, weight->dtype, N, K, 0};
  if (out->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    if (bias) { /* the bias in the GEMM's epilogue (an f32 weight rounded to a 16-bit in's dtype) */
      rc = tcu_linear_lt(ctx, out->data, NULL, (int)out->dtype, in->data, (int)in->dtype, weight->data,
                         (int)weight->dtype, bias->data, rows, N, K, 0);
      if (rc != STRATA_EUNSUPPORTED) goto fail;
    }
    TRY(gemm_core(ctx, out->device, o, x, w, 0, 1, 1.f, 0.f, 1));
    if (bias) TRY(tcu_bias_forward(ctx, out->data, out->data, (int)out->dtype, bias->data, rows, N));
#endif
    goto fail;
  }
  if (bias) { /* out = bias, then GEMM with beta 1: OpenBLAS skips its own C-scaling pass */
    float *O = out->data;
    const float *bv = bias->data;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (rows * N > 32768)
    for (int64_t r = 0; r < rows; r++) memcpy(O + r * N, bv, (size_t)N * sizeof(float));
  }
  TRY(gemm_core(ctx, TENSOR_CPU, o, x, w, 0, 1, 1.f, bias ? 1.f : 0.f, 1));
fail:
  return rc;
}

int tensor_linear_backward(tensor_ctx_t *ctx, tensor_t *din, tensor_t *dweight, tensor_t *dbias,
                           const tensor_t *dout, const tensor_t *in, const tensor_t *weight) {
  int rc = STRATA_OK;
  char s1[96], s2[96], s3[96];
  const char *fn = "tensor_linear_backward";
  if (!ctx) return STRATA_EINVAL;
  /* dout, in and din f32, or all of one 16-bit dtype on CUDA (the weight
   * then of that dtype or f32, rounded to it); dweight, dbias f32 */
  TRY(tensor_check_act(ctx, fn, "dout", dout, tensor_act_dtype(dout), 1, 4));
  tensor_dtype_t adt = dout->dtype;
  TRY(tensor_check_act(ctx, fn, "in", in, adt, 1, 4));
  TRY(tensor_check(ctx, fn, "weight", weight, weight && weight->dtype == adt ? adt : TENSOR_F32, 2, 2));
  int dev = dout->device;
  TRY(tensor_check_device(ctx, fn, "in", in, dev));
  TRY(tensor_check_device(ctx, fn, "weight", weight, dev));
  int K = (int)in->shape[in->ndim - 1], N = (int)dout->shape[dout->ndim - 1];
  int64_t rows = tensor_numel(in) / K;
  CHECK(weight->shape[0] == N && weight->shape[1] == K && tensor_numel(dout) / N == rows,
        STRATA_ESHAPE, "%s: dout %s does not match in %s x weight %s^T", fn,
        tensor_describe(dout, s1, sizeof s1), tensor_describe(in, s2, sizeof s2),
        tensor_describe(weight, s3, sizeof s3));
  if (din) {
    TRY(tensor_check_act(ctx, fn, "din", din, adt, 1, 4));
    TRY(tensor_check_device(ctx, fn, "din", din, dev));
    CHECK(tensor_same_shape(din, in), STRATA_ESHAPE, "%s: din %s must have in's shape %s", fn,
          tensor_describe(din, s1, sizeof s1), tensor_describe(in, s2, sizeof s2));
  }
  if (dweight) {
    TRY(tensor_check(ctx, fn, "dweight", dweight, TENSOR_F32, 2, 2));
    TRY(tensor_check_device(ctx, fn, "dweight", dweight, dev));
    CHECK(tensor_same_shape(dweight, weight), STRATA_ESHAPE, "%s: dweight %s != weight %s", fn,
          tensor_describe(dweight, s1, sizeof s1), tensor_describe(weight, s2, sizeof s2));
  }
  if (dbias) {
    TRY(tensor_check(ctx, fn, "dbias", dbias, TENSOR_F32, 1, 1));
    TRY(tensor_check_device(ctx, fn, "dbias", dbias, dev));
    CHECK(dbias->shape[0] == N, STRATA_ESHAPE, "%s: dbias %s, expected %d", fn,
          tensor_describe(dbias, s1, sizeof s1), N);
  }
  operand_t d = {dout->data, adt, (int)rows, N, 0}, x = {in->data, adt, (int)rows, K, 0};
  operand_t w = {weight->data, weight->dtype, N, K, 0};
  if (din) {
    operand_t g = {din->data, adt, (int)rows, K, 0};
    TRY(gemm_core(ctx, dev, g, d, w, 0, 0, 1.f, 1.f, 1)); /* din += dout W */
  }
#if defined(STRATA_CUDA)
  if (dweight && dbias && dev != TENSOR_CPU) { /* dW and the bias gradient in one cuBLASLt call */
    void *db = NULL;
    TRY(tensor_device_alloc(ctx, &db, (size_t)N * sizeof(float), dev)); /* the epilogue overwrites */
    rc = tcu_linear_wgrad_lt(ctx, dweight->data, db, dout->data, in->data, (int)adt, rows, N, K);
    if (rc == STRATA_OK) rc = tcu_acc(ctx, dbias->data, db, TENSOR_F32, N);
    tensor_device_free(ctx, db, dev);
    if (rc != STRATA_EUNSUPPORTED) goto fail;
    rc = STRATA_OK;
  }
#endif
  if (dweight) {
    operand_t g = {dweight->data, TENSOR_F32, N, K, 0};
    TRY(gemm_core(ctx, dev, g, d, x, 1, 0, 1.f, 1.f, 1)); /* dW += dout^T in */
  }
  if (dbias) {
    if (dev == TENSOR_CPU) {
      bias_grad_cpu(ctx, dbias->data, dout->data, rows, N);
    } else {
#if defined(STRATA_CUDA)
      TRY(tcu_bias_backward(ctx, dbias->data, dout->data, (int)adt, rows, N));
#endif
    }
  }
fail:
  return rc;
}

int tensor_bias_add_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *in,
                            const tensor_t *bias) {
  int rc = STRATA_OK;
  char s1[96], s2[96], s3[96];
  const char *fn = "tensor_bias_add_forward";
  if (!ctx) return STRATA_EINVAL;
  TRY(tensor_check_act(ctx, fn, "out", out, tensor_act_dtype(out), 1, 4));
  TRY(tensor_check_act(ctx, fn, "in", in, out->dtype, 1, 4));
  TRY(tensor_check(ctx, fn, "bias", bias, TENSOR_F32, 1, 1));
  TRY(tensor_check_device(ctx, fn, "in", in, out->device));
  TRY(tensor_check_device(ctx, fn, "bias", bias, out->device));
  int N = (int)bias->shape[0];
  CHECK(tensor_same_shape(out, in) && in->shape[in->ndim - 1] == N, STRATA_ESHAPE,
        "%s: out %s, in %s, bias %s", fn, tensor_describe(out, s1, sizeof s1),
        tensor_describe(in, s2, sizeof s2), tensor_describe(bias, s3, sizeof s3));
  int64_t rows = tensor_numel(in) / N;
  if (out->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    TRY(tcu_bias_forward(ctx, out->data, in->data, (int)in->dtype, bias->data, rows, N));
#endif
    goto fail;
  }
  float *O = out->data;
  const float *X = in->data, *bv = bias->data;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (rows * N > 32768)
  for (int64_t r = 0; r < rows; r++)
    for (int j = 0; j < N; j++) O[r * N + j] = X[r * N + j] + bv[j];
fail:
  return rc;
}

int tensor_bias_add_backward(tensor_ctx_t *ctx, tensor_t *din, tensor_t *dbias, const tensor_t *dout) {
  int rc = STRATA_OK;
  char s1[96], s2[96];
  const char *fn = "tensor_bias_add_backward";
  if (!ctx) return STRATA_EINVAL;
  TRY(tensor_check_act(ctx, fn, "dout", dout, tensor_act_dtype(dout), 1, 4));
  tensor_dtype_t adt = dout->dtype;
  int N = (int)dout->shape[dout->ndim - 1];
  int64_t rows = tensor_numel(dout) / N;
  if (din) {
    TRY(tensor_check_act(ctx, fn, "din", din, adt, 1, 4));
    TRY(tensor_check_device(ctx, fn, "din", din, dout->device));
    CHECK(tensor_same_shape(din, dout), STRATA_ESHAPE, "%s: din %s != dout %s", fn,
          tensor_describe(din, s1, sizeof s1), tensor_describe(dout, s2, sizeof s2));
  }
  if (dbias) {
    TRY(tensor_check(ctx, fn, "dbias", dbias, TENSOR_F32, 1, 1));
    TRY(tensor_check_device(ctx, fn, "dbias", dbias, dout->device));
    CHECK(dbias->shape[0] == N, STRATA_ESHAPE, "%s: dbias %s, expected %d", fn,
          tensor_describe(dbias, s1, sizeof s1), N);
  }
  if (dout->device != TENSOR_CPU) {
#if defined(STRATA_CUDA)
    if (din) TRY(tcu_acc(ctx, din->data, dout->data, (int)adt, rows * N));
    if (dbias) TRY(tcu_bias_backward(ctx, dbias->data, dout->data, (int)adt, rows, N));
#endif
    goto fail;
  }
  if (din) {
    float *D = din->data;
    const float *G = dout->data;
    int64_t n = rows * N;
#pragma omp parallel for num_threads(ctx->threads) schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) D[i] += G[i];
  }
  if (dbias) bias_grad_cpu(ctx, dbias->data, dout->data, rows, N);
fail:
  return rc;
}
