/* 2D tensor parallelism's SUMMA product (strata/par_summa.h) against the
 * whole product computed here in double precision (mpirun -np 1 and 4:
 * q = 1, 2; with argument d, 2.5D of depth d: mpirun -np 8 ... 2 is q = 2,
 * d = 2, the rows of X split over the layers too): every rank draws the whole X (M x K), W (K x N) and dY (M x N)
 * from one seed and gives SUMMA its blocks; its blocks of Y = X W, of
 * dX = dY W^T and of dW = X^T dY (added to a gradient that starts at 0.25,
 * so the accumulation is checked too) must match the double ones within
 * fp32 rounding of K (or M, N) terms of O(1): 1e-5 absolute. libcomm's
 * counters equal SUMMA's traffic per rank: forward, sent x + w (root of
 * its row's and its column's broadcast once each), received (q - 1)(x + w);
 * backward, the broadcasts' w + x and the reductions' (q - 1)(q + 1) / q
 * (x + w) sent, for x, w the bytes of one block of X, W, and under 2.5D the
 * weight gradient's allreduce over the depth, 2 (d - 1) / d w; the partners
 * a rank talks to are its row, its column and its depth: 2 (q - 1) + d - 1.
 * The planner's per-product bytes (par_plan_tp_linear_sent) are the same.
 * A bad mesh (a count that is not q^2 d) is refused by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/par_plan.h>
#include <strata/par_summa.h>

#include "gpt/mpi_check.h"



/* Block (bi, bj) of an R x C row-major matrix cut in qr x qc blocks, into a tensor. */
static tensor_t blk(tensor_ctx_t *tc, const float *a, int R, int C, int qr, int qc, int bi, int bj, float add) {
  tensor_t t;
  int64_t s[2] = {R / qr, C / qc};
  if (tensor_alloc(tc, &t, TENSOR_F32, TENSOR_CPU, 2, s)) MPI_Abort(MPI_COMM_WORLD, 1);
  for (int r = 0; r < R / qr; r++)
    for (int c = 0; c < C / qc; c++)
      ((float *)t.data)[r * (C / qc) + c] = (a ? a[(size_t)(bi * (R / qr) + r) * C + bj * (C / qc) + c] : 0.f) + add;
  return t;
}

/* The block's elements against the double product's (R x C). */
static void compare(const char *what, const tensor_t *t, const double *ref, int C, int bi, int bj, float add) {
  int R = (int)t->shape[0], Cb = (int)t->shape[1];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < Cb; c++) {
      double want = ref[(size_t)(bi * R + r) * C + bj * Cb + c] + add, got = ((const float *)t->data)[r * Cb + c];
      if (fabs(got - want) > 1e-5) {
        CHECK(0, "%s block (%d, %d) [%d, %d]: %g, the product %g", what, bi, bj, r, c, got, want);
        return;
      }
    }
}

static uint64_t sent(comm_t *c, comm_kind_t k, int recv) {
  comm_counter_t n;
  comm_counters(c, k, &n);
  return recv ? n.bytes_recv : n.bytes_sent;
}

int main(int argc, char **argv) {
  int depth = argc > 1 ? atoi(argv[1]) : 1;
  comm_t *world;
  tensor_ctx_t *tc;
  check_start("summa_equiv", &world, &tc);
  par_summa_t *s;
  char err[256];
  if (par_summa_create(&s, world, depth, err, sizeof err)) {
    fprintf(stderr, "summa_equiv: %s\n", err);
    return 1;
  }
  int i, j, q, layer, d;
  par_summa_coords(s, &i, &j, &q);
  par_summa_depth(s, &layer, &d);
  const int M = 8, K = 12, N = 6, qr = q * d, bi = layer * q + i; /* X's and Y's rows: over the layers and rows */
  float *X = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * K * N), *G = malloc(sizeof(float) * M * N);
  check_fill(X, (size_t)M * K, 3, 1.f), check_fill(W, (size_t)K * N, 5, 1.f), check_fill(G, (size_t)M * N, 7, 1.f);
  double *Y = calloc((size_t)M * N, sizeof(double)), *DX = calloc((size_t)M * K, sizeof(double)),
         *DW = calloc((size_t)K * N, sizeof(double));
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++)
      for (int k = 0; k < K; k++) {
        Y[m * N + n] += (double)X[m * K + k] * W[k * N + n];
        DX[m * K + k] += (double)G[m * N + n] * W[k * N + n];
        DW[k * N + n] += (double)X[m * K + k] * G[m * N + n];
      }
  tensor_t x = blk(tc, X, M, K, qr, q, bi, j, 0), w = blk(tc, W, K, N, q, q, i, j, 0),
           g = blk(tc, G, M, N, qr, q, bi, j, 0);
  tensor_t y = blk(tc, NULL, M, N, qr, q, bi, j, 0), dx = blk(tc, NULL, M, K, qr, q, bi, j, 0.25f),
           dw = blk(tc, NULL, K, N, q, q, i, j, 0.25f);
  comm_t *row = par_summa_row(s), *col = par_summa_col(s), *dep = par_summa_dep(s);
  comm_counters_reset(row), comm_counters_reset(col);
  if (dep) comm_counters_reset(dep);
  CHECK(par_summa_forward(s, tc, &y, &x, &w) == 0, "forward: %s", par_summa_error(s));
  double xb = (double)tensor_numel(&x) * 4, wb = (double)tensor_numel(&w) * 4;
  double fs = (double)(sent(row, COMM_K_BROADCAST, 0) + sent(col, COMM_K_BROADCAST, 0));
  double fr = (double)(sent(row, COMM_K_BROADCAST, 1) + sent(col, COMM_K_BROADCAST, 1));
  CHECK(fs == (q > 1 ? xb + wb : 0) && fr == (q - 1) * (xb + wb),
        "forward: sent %.0f, received %.0f; SUMMA's %.0f and %.0f", fs, fr, q > 1 ? xb + wb : 0, (q - 1) * (xb + wb));
  comm_counters_reset(row), comm_counters_reset(col);
  CHECK(par_summa_backward(s, tc, &dx, &dw, &g, &x, &w) == 0, "backward: %s", par_summa_error(s));
  double bs = 0;
  for (comm_kind_t k = 0; k < COMM_NKINDS; k++)
    bs += (double)(sent(row, k, 0) + sent(col, k, 0) + (dep ? sent(dep, k, 0) : 0));
  double want = (q > 1 ? (xb + wb) + (q - 1.0) * (q + 1.0) / q * (xb + wb) : 0) + 2.0 * (d - 1) / d * wb;
  CHECK(bs == want, "backward: sent %.0f bytes; SUMMA's %.0f", bs, want);
  double planned = par_plan_tp_linear_sent(d > 1 ? PAR_TP_2P5D : PAR_TP_2D, q * q * d, d, M, K, N, 4);
  CHECK(fs + bs == planned, "the planner's bytes for this product %.0f, sent %.0f", planned, fs + bs);
  compare("y", &y, Y, N, bi, j, 0);
  compare("dx", &dx, DX, K, bi, j, 0.25f);
  compare("dw", &dw, DW, N, i, j, 0.25f);
  int partners = comm_size(row) + comm_size(col) - 2 + (dep ? comm_size(dep) - 1 : 0);
  CHECK(partners == 2 * (q - 1) + d - 1, "%d partners", partners);
  par_summa_t *bad = NULL;
  comm_t *three = NULL;
  comm_split(&three, world, rank < 3 ? 0 : -1, rank);
  if (three && ranks >= 3) {
    CHECK(par_summa_create(&bad, three, 1, err, sizeof err) == STRATA_EINVAL &&
              strstr(err, "square number of ranks, not 3"),
          "3 ranks: %s", err);
  }
  comm_destroy(three);
  if (rank == 0)
    printf("summa_equiv np=%d (q = %d, depth %d): Y, dX and dW blocks equal the product; %.0f + %.0f bytes sent per "
           "rank, %d partners\n",
           ranks, q, d, fs, bs, partners);
  tensor_t all[] = {x, w, g, y, dx, dw};
  for (int k = 0; k < 6; k++) tensor_free(tc, &all[k]);
  free(X), free(W), free(G), free(Y), free(DX), free(DW);
  par_summa_destroy(s);
  return check_finish(world, tc);
}
