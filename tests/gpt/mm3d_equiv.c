/* 3D tensor parallelism's matrix product (strata/par_mm3d.h) against the
 * whole product computed here in double precision (mpirun -np 1 and 8:
 * q = 1, 2): every rank draws the whole X (M x K), W (K x N) and dY from
 * one seed and gives the product its pieces (rank (i, j, l): rows j of
 * X_il, rows i of W_lj, rows l of dY_ij); its pieces of Y, dX and dW (the
 * gradients starting at 0.25: accumulation) match the double ones within
 * fp32 rounding of up to K terms of O(1), 1e-5. libcomm's counters equal
 * the volumes: forward (q - 1)/q (a + b + c) sent, backward (q - 1)/q
 * (2a + 2b + c), for a, b, c the bytes of one block of X, W, Y; a rank's
 * partners are 3 (q - 1), and the planner's per-product bytes
 * (par_plan_tp_linear_sent) are the sent ones. A count that is not a cube
 * is refused by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/par_mm3d.h>
#include <strata/par_plan.h>

#include "gpt/mpi_check.h"



/* Piece p (of q, by rows) of block (bi, bj) (of a q x q cut) of an R x C matrix. */
static tensor_t piece(tensor_ctx_t *tc, const float *a, int R, int C, int q, int bi, int bj, int p, float add) {
  tensor_t t;
  int pr = R / q / q, pc = C / q;
  int64_t s[2] = {pr, pc};
  if (tensor_alloc(tc, &t, TENSOR_F32, TENSOR_CPU, 2, s)) MPI_Abort(MPI_COMM_WORLD, 1);
  for (int r = 0; r < pr; r++)
    for (int c = 0; c < pc; c++)
      ((float *)t.data)[r * pc + c] = (a ? a[(size_t)(bi * (R / q) + p * pr + r) * C + bj * pc + c] : 0.f) + add;
  return t;
}

static void compare(const char *what, const tensor_t *t, const double *ref, int R, int C, int q, int bi, int bj, int p,
                    float add) {
  int pr = R / q / q, pc = C / q;
  for (int r = 0; r < pr; r++)
    for (int c = 0; c < pc; c++) {
      double want = ref[(size_t)(bi * (R / q) + p * pr + r) * C + bj * pc + c] + add;
      double got = ((const float *)t->data)[r * pc + c];
      if (fabs(got - want) > 1e-5) {
        CHECK(0, "%s piece [%d, %d]: %g, the product %g", what, r, c, got, want);
        return;
      }
    }
}

static double sent(par_mm3d_t *m) {
  double s = 0;
  const char *ax[3] = {"i", "j", "l"};
  for (int a = 0; a < 3; a++)
    for (comm_kind_t k = 0; k < COMM_NKINDS; k++) {
      comm_counter_t n;
      comm_counters(par_mm3d_axis(m, ax[a]), k, &n);
      s += (double)n.bytes_sent;
    }
  return s;
}

int main(void) {
  comm_t *world;
  tensor_ctx_t *tc;
  check_start("mm3d_equiv", &world, &tc);
  par_mm3d_t *m;
  char err[256];
  if (par_mm3d_create(&m, world, err, sizeof err)) {
    fprintf(stderr, "mm3d_equiv: %s\n", err);
    return 1;
  }
  int i, j, l, q;
  par_mm3d_coords(m, &i, &j, &l, &q);
  const int M = 8, K = 8, N = 4;
  float *X = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * K * N), *G = malloc(sizeof(float) * M * N);
  check_fill(X, (size_t)M * K, 3, 1.f), check_fill(W, (size_t)K * N, 5, 1.f), check_fill(G, (size_t)M * N, 7, 1.f);
  double *Y = calloc((size_t)M * N, sizeof(double)), *DX = calloc((size_t)M * K, sizeof(double)),
         *DW = calloc((size_t)K * N, sizeof(double));
  for (int a = 0; a < M; a++)
    for (int n = 0; n < N; n++)
      for (int k = 0; k < K; k++) {
        Y[a * N + n] += (double)X[a * K + k] * W[k * N + n];
        DX[a * K + k] += (double)G[a * N + n] * W[k * N + n];
        DW[k * N + n] += (double)X[a * K + k] * G[a * N + n];
      }
  tensor_t x = piece(tc, X, M, K, q, i, l, j, 0), w = piece(tc, W, K, N, q, l, j, i, 0),
           g = piece(tc, G, M, N, q, i, j, l, 0), y = piece(tc, NULL, M, N, q, i, j, l, 0),
           dx = piece(tc, NULL, M, K, q, i, l, j, 0.25f), dw = piece(tc, NULL, K, N, q, l, j, i, 0.25f);
  double A = (double)(M / q) * (K / q) * 4, B = (double)(K / q) * (N / q) * 4, C = (double)(M / q) * (N / q) * 4;
  double s0 = sent(m);
  CHECK(par_mm3d_forward(m, tc, &y, &x, &w) == 0, "forward: %s", par_mm3d_error(m));
  double s1 = sent(m);
  CHECK(par_mm3d_backward(m, tc, &dx, &dw, &g, &x, &w) == 0, "backward: %s", par_mm3d_error(m));
  double s2 = sent(m), f = (q - 1.0) / q;
  CHECK(s1 - s0 == f * (A + B + C) && s2 - s1 == f * (2 * A + 2 * B + C),
        "sent %.0f forward, %.0f backward; the formulas %.0f and %.0f", s1 - s0, s2 - s1, f * (A + B + C),
        f * (2 * A + 2 * B + C));
  double planned = par_plan_tp_linear_sent(PAR_TP_3D, q * q * q, 1, M, K, N, 4);
  CHECK(s2 - s0 == planned, "the planner's bytes for this product %.0f, sent %.0f", planned, s2 - s0);
  compare("y", &y, Y, M, N, q, i, j, l, 0);
  compare("dx", &dx, DX, M, K, q, i, l, j, 0.25f);
  compare("dw", &dw, DW, K, N, q, l, j, i, 0.25f);
  int partners = comm_size(par_mm3d_axis(m, "i")) + comm_size(par_mm3d_axis(m, "j")) +
                 comm_size(par_mm3d_axis(m, "l")) - 3;
  CHECK(partners == 3 * (q - 1), "%d partners", partners);
  comm_t *four = NULL;
  comm_split(&four, world, rank < 4 ? 0 : -1, rank);
  par_mm3d_t *bad = NULL;
  if (four && ranks >= 4)
    CHECK(par_mm3d_create(&bad, four, err, sizeof err) == STRATA_EINVAL && strstr(err, "cube number of ranks, not 4"),
          "4 ranks: %s", err);
  comm_destroy(four);
  if (rank == 0)
    printf("mm3d_equiv np=%d (q = %d): Y, dX and dW pieces equal the product; %.0f + %.0f bytes sent per rank, %d "
           "partners\n",
           ranks, q, s1 - s0, s2 - s1, partners);
  tensor_t all[] = {x, w, g, y, dx, dw};
  for (int k = 0; k < 6; k++) tensor_free(tc, &all[k]);
  free(X), free(W), free(G), free(Y), free(DX), free(DW);
  par_mm3d_destroy(m);
  return check_finish(world, tc);
}
