/* Ring self-attention (par_ring_attention_forward / _backward) against the
 * serial causal attention (tensor_attention_forward / _backward, checked
 * against the formula and finite differences in tests/tensor), mpirun -np
 * 1, 2, 4 (the sequence group is every rank): every rank draws the whole
 * sequence's qkv and output gradient from the same seed, computes the
 * serial attention, and compares its slice of the output, log-sum-exp and
 * qkv gradient with what the ring gives on its Tl = T / sp tokens:
 *  - equal within fp32 reordering: the online softmax sums the same terms
 *    block by block, rescaled when the running maximum grows (a few ulp per
 *    block), so 2e-5 absolute + 1e-4 relative on O(1) values, as the
 *    single-rank blockwise test in tests/tensor; a block missed, doubled or
 *    masked wrongly moves a row by O(0.1);
 *  - libcomm's sends equal the ring's formula: (sp - 1) 2 B Tl C floats in
 *    the forward, (4 sp - 2) B Tl C in the backward, to one partner each way;
 *  - the scores never take more than Tl x Tl per thread: the accountant's
 *    peak over the call is the ring's buffers alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/par_ring.h>

#include "gpt/mpi_check.h"



static tensor_t mk(tensor_ctx_t *tc, int64_t a, int64_t b, int64_t c) {
  tensor_t t;
  int64_t s[3] = {a, b, c};
  if (tensor_alloc(tc, &t, TENSOR_F32, TENSOR_CPU, 3, s)) MPI_Abort(MPI_COMM_WORLD, 1);
  return t;
}

static double worst;
static void close_to(const char *what, const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]);
    if (e > worst) worst = e;
    if (e > 2e-5 + 1e-4 * fabs((double)want[i])) {
      CHECK(0, "%s[%zu]: ring %g, serial %g", what, i, got[i], want[i]);
      return;
    }
  }
}

static void run(comm_t *sp, tensor_ctx_t *tc, int B, int T, int NH, int hs) {
  int C = NH * hs, Tl = T / ranks;
  tensor_t qkv = mk(tc, B, T, 3 * C), out = mk(tc, B, T, C), lse = mk(tc, B, NH, T), dout = mk(tc, B, T, C);
  tensor_t dqkv = mk(tc, B, T, 3 * C);
  check_fill(qkv.data, (size_t)B * T * 3 * C, 7, 3.f), check_fill(dout.data, (size_t)B * T * C, 9, 1.f);
  if (tensor_attention_forward(tc, &out, &lse, &qkv, NH) ||
      tensor_attention_backward(tc, &dqkv, &dout, &qkv, &out, &lse, NH)) {
    fprintf(stderr, "ring_equiv: serial attention: %s\n", tensor_last_error(tc));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* this rank's tokens */
  tensor_t lq = mk(tc, B, Tl, 3 * C), lo = mk(tc, B, Tl, C), ll = mk(tc, B, NH, Tl), lg = mk(tc, B, Tl, C);
  tensor_t ld = mk(tc, B, Tl, 3 * C);
  for (int b = 0; b < B; b++) {
    memcpy((float *)lq.data + (size_t)b * Tl * 3 * C, (float *)qkv.data + ((size_t)b * T + rank * Tl) * 3 * C,
           sizeof(float) * Tl * 3 * C);
    memcpy((float *)lg.data + (size_t)b * Tl * C, (float *)dout.data + ((size_t)b * T + rank * Tl) * C,
           sizeof(float) * Tl * C);
  }
  size_t peak0 = 0, peak1 = 0, cur = 0;
  tensor_memory(tc, TENSOR_CPU, &cur, NULL);
  tensor_memory_reset_peak(tc, TENSOR_CPU);
  comm_counters_reset(sp);
  char err[512];
  CHECK(par_ring_attention_forward(sp, tc, &lo, &ll, &lq, NH, err, sizeof err) == 0, "forward: %s", err);
  comm_counter_t f, bk;
  comm_counters(sp, COMM_K_SEND, &f);
  tensor_memory(tc, TENSOR_CPU, NULL, &peak0);
  CHECK(par_ring_attention_backward(sp, tc, &ld, &lg, &lq, &lo, &ll, NH, err, sizeof err) == 0, "backward: %s", err);
  comm_counters(sp, COMM_K_SEND, &bk);
  tensor_memory(tc, TENSOR_CPU, NULL, &peak1);
  for (int b = 0; b < B; b++) {
    close_to("out", (float *)lo.data + (size_t)b * Tl * C, (float *)out.data + ((size_t)b * T + rank * Tl) * C,
             (size_t)Tl * C);
    close_to("dqkv", (float *)ld.data + (size_t)b * Tl * 3 * C,
             (float *)dqkv.data + ((size_t)b * T + rank * Tl) * 3 * C, (size_t)Tl * 3 * C);
    for (int h = 0; h < NH; h++)
      close_to("lse", (float *)ll.data + ((size_t)b * NH + h) * Tl,
               (float *)lse.data + ((size_t)b * NH + h) * T + rank * Tl, (size_t)Tl);
  }
  double X = (double)B * Tl * C * sizeof(float);
  double fwd = (double)f.bytes_sent, bwd = (double)(bk.bytes_sent - f.bytes_sent);
  CHECK(fwd == (ranks - 1) * 2 * X && bwd == (ranks > 1 ? (4.0 * ranks - 2) * X : 0),
        "sent %.0f bytes forward, %.0f backward; the ring's formula %.0f and %.0f", fwd, bwd, (ranks - 1) * 2 * X,
        ranks > 1 ? (4.0 * ranks - 2) * X : 0.0);
  /* buffers: forward q, 2 (k|v), m, l; backward q, dq, d, 2 (k|v|dk|dv) */
  double fb = X * 5 + 2.0 * B * NH * Tl * 4, bb = X * 10 + (double)B * NH * Tl * 4;
  CHECK((double)(peak0 - cur) == fb && (double)(peak1 - cur) == bb,
        "the ring held %zu then %zu bytes beyond its inputs; its buffers are %.0f and %.0f", peak0 - cur,
        peak1 - cur, fb, bb);
  if (rank == 0)
    printf("ring attention sp=%d, B=%d T=%d heads=%d hs=%d: the serial attention's slice (worst %.2g); %.0f + %.0f "
           "bytes sent per rank\n",
           ranks, B, T, NH, hs, worst, fwd, bwd);
  tensor_t all[] = {qkv, out, lse, dout, dqkv, lq, lo, ll, lg, ld};
  for (int i = 0; i < 10; i++) tensor_free(tc, &all[i]);
}

int main(int argc, char **argv) {
  comm_t *sp;
  tensor_ctx_t *tc;
  check_start("ring_equiv", &sp, &tc);
  run(sp, tc, 2, 16 * 4, 2, 8);
  run(sp, tc, 1, 12 * 4, 3, 4); /* rows shorter than a vector */
  return check_finish(sp, tc);
}
