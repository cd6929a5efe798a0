/* Ring self-attention (Li et al. 2021, "Sequence Parallelism: Long Sequence
 * Training from System Perspective", arXiv 2105.13120, sec. 3.2) over a
 * sequence-split group of sp ranks: rank r holds tokens [r Tl, (r + 1) Tl)
 * of every sequence; its queries stay, and the key/value blocks travel
 * around the ring (to rank r + 1, from rank r - 1), each step's transfer
 * posted before the step's block is computed so that the two overlap. The
 * softmax runs across blocks by libtensor's blockwise attention (the online
 * softmax), never holding more than a Tl x Tl block of scores.
 *
 * Bytes each rank sends, with X = B Tl C floats of one of k, v, dk, dv:
 *   forward   (sp - 1) 2X   (k and v, to every other rank)
 *   backward  (sp - 1) 4X + 2X (k, v and the block's running dk, dv; the
 *             last hop brings dk and dv home to the block's own rank);
 *             nothing at all when sp = 1
 * Apart from the causal mask, which leaves a rank idle on the blocks ahead
 * of its queries (rank 0 computes one block, rank sp - 1 all of them),
 * every rank does the same work. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/comm.h>
#include <strata/par_ring.h>

#include "gpt_internal.h"

static int fail(char *err, size_t n, int rc, const char *what, const char *why) {
  if (err && n) snprintf(err, n, "ring attention: %s: %s", what, why);
  return rc;
}

/* Column block [c0, c0 + C) of x (B, T, W) into y (B, T, C), or back (added: into x). */
static void unpack(float *y, const float *x, int64_t BT, int W, int c0, int C) {
  for (int64_t i = 0; i < BT; i++) memcpy(y + i * C, x + i * W + c0, (size_t)C * sizeof(float));
}
static void add_back(float *x, const float *y, int64_t BT, int W, int c0, int C) {
  for (int64_t i = 0; i < BT; i++)
    for (int c = 0; c < C; c++) x[i * W + c0 + c] += y[i * C + c];
}

/* q, k and v of packed qkv (BT rows of 3C) into q and kv (k then v), each BT x C. */
static void split_qkv(float *q, float *kv, const float *x, int64_t BT, int C) {
  unpack(q, x, BT, 3 * C, 0, C);
  unpack(kv, x, BT, 3 * C, C, C);
  unpack(kv + BT * C, x, BT, 3 * C, 2 * C, C);
}

/* Zeroed (B, rows, C) tensors, counted by tc's accountant. */
static int alloc3(tensor_ctx_t *tc, tensor_t *t, int64_t B, int64_t rows, int64_t C) {
  int64_t s[3] = {B, rows, C};
  return tensor_alloc(tc, t, TENSOR_F32, TENSOR_CPU, 3, s);
}

static void free_all(tensor_ctx_t *tc, tensor_t *t, int n) {
  for (int i = 0; i < n; i++) tensor_free(tc, &t[i]);
}

/* One hop: post the send of n floats at snd to rank + 1 and the receive into
 * rcv from rank - 1. */
static int post(struct comm *sp, const float *snd, float *rcv, size_t n, comm_request_t **rs, comm_request_t **rr) {
  int size = comm_size(sp), r = comm_rank(sp), rc;
  if ((rc = comm_irecv(sp, rcv, n, COMM_F32, (r + size - 1) % size, 71, rr))) return rc;
  return comm_isend(sp, snd, n, COMM_F32, (r + 1) % size, 71, rs);
}

int par_ring_attention_forward(struct comm *sp, tensor_ctx_t *tc, tensor_t *out, tensor_t *lse, const tensor_t *qkv,
                               int heads, char *err, size_t errlen) {
  if (!sp || !tc || !out || !lse || !qkv) return STRATA_EINVAL;
  int size = comm_size(sp), r = comm_rank(sp), rc = STRATA_OK;
  int64_t B = qkv->shape[0], Tl = qkv->shape[1], C = qkv->shape[2] / 3, X = B * Tl * C;
  tensor_t t[5] = {{0}}; /* q, two k|v buffers, m, l */
  comm_request_t *rs = NULL, *rr = NULL;
  int64_t sr[3] = {B, heads, Tl};
  if ((rc = alloc3(tc, &t[0], B, Tl, C)) || (rc = alloc3(tc, &t[1], B, 2 * Tl, C)) ||
      (rc = alloc3(tc, &t[2], B, 2 * Tl, C)) || (rc = tensor_alloc(tc, &t[3], TENSOR_F32, TENSOR_CPU, 3, sr)) ||
      (rc = tensor_alloc(tc, &t[4], TENSOR_F32, TENSOR_CPU, 3, sr))) {
    rc = fail(err, errlen, rc, "buffers", tensor_last_error(tc));
    goto done;
  }
  float *kv[2] = {t[1].data, t[2].data};
  split_qkv(t[0].data, kv[0], qkv->data, B * Tl, (int)C);
  tensor_fill(tc, &t[3], -INFINITY);
  if ((rc = tensor_zero(tc, out))) goto tfail;
  for (int s = 0; s < size; s++) {
    int j = (r - s + size) % size, cur = s & 1;
    if (s + 1 < size && (rc = post(sp, kv[cur], kv[!cur], 2 * (size_t)X, &rs, &rr))) {
      rc = fail(err, errlen, rc, "passing k and v", comm_last_error(sp));
      goto done;
    }
    tensor_t k = tensor_view3(kv[cur], TENSOR_F32, TENSOR_CPU, B, Tl, C);
    tensor_t v = tensor_view3(kv[cur] + X, TENSOR_F32, TENSOR_CPU, B, Tl, C);
    if ((rc = tensor_attention_block_forward(tc, out, &t[3], &t[4], &t[0], &k, &v, heads, (int64_t)r * Tl,
                                             (int64_t)j * Tl)))
      goto tfail;
    int w1 = comm_wait(&rs), w2 = comm_wait(&rr);
    if (w1 || w2) {
      rc = fail(err, errlen, w1 ? w1 : w2, "passing k and v", comm_last_error(sp));
      goto done;
    }
  }
  if ((rc = tensor_attention_block_finish(tc, out, lse, out, &t[3], &t[4], heads))) goto tfail;
  goto done;
tfail:
  rc = fail(err, errlen, rc, "blocks", tensor_last_error(tc));
done:
  comm_wait(&rs), comm_wait(&rr);
  free_all(tc, t, 5);
  return rc;
}

int par_ring_attention_backward(struct comm *sp, tensor_ctx_t *tc, tensor_t *dqkv, const tensor_t *dout,
                                const tensor_t *qkv, const tensor_t *out, const tensor_t *lse, int heads, char *err,
                                size_t errlen) {
  if (!sp || !tc || !dqkv || !dout || !qkv || !out || !lse) return STRATA_EINVAL;
  int size = comm_size(sp), r = comm_rank(sp), rc = STRATA_OK;
  int64_t B = qkv->shape[0], Tl = qkv->shape[1], C = qkv->shape[2] / 3, X = B * Tl * C;
  tensor_t t[5] = {{0}}; /* q, dq, d, two k|v|dk|dv buffers */
  comm_request_t *rs = NULL, *rr = NULL;
  int64_t sr[3] = {B, heads, Tl};
  if ((rc = alloc3(tc, &t[0], B, Tl, C)) || (rc = alloc3(tc, &t[1], B, Tl, C)) ||
      (rc = tensor_alloc(tc, &t[2], TENSOR_F32, TENSOR_CPU, 3, sr)) || (rc = alloc3(tc, &t[3], B, 4 * Tl, C)) ||
      (rc = alloc3(tc, &t[4], B, 4 * Tl, C))) {
    rc = fail(err, errlen, rc, "buffers", tensor_last_error(tc));
    goto done;
  }
  float *buf[2] = {t[3].data, t[4].data};
  split_qkv(t[0].data, buf[0], qkv->data, B * Tl, (int)C); /* (dk, dv after k and v: zero) */
  if ((rc = tensor_attention_block_rowdot(tc, &t[2], dout, out, heads))) goto tfail;
  for (int s = 0; s < size; s++) {
    int j = (r - s + size) % size, cur = s & 1;
    tensor_t k = tensor_view3(buf[cur], TENSOR_F32, TENSOR_CPU, B, Tl, C);
    tensor_t v = tensor_view3(buf[cur] + X, TENSOR_F32, TENSOR_CPU, B, Tl, C);
    tensor_t dk = tensor_view3(buf[cur] + 2 * X, TENSOR_F32, TENSOR_CPU, B, Tl, C);
    tensor_t dv = tensor_view3(buf[cur] + 3 * X, TENSOR_F32, TENSOR_CPU, B, Tl, C);
    /* the next block's k and v travel while this one computes; its dk, dv only once done */
    if (s + 1 < size && (rc = post(sp, buf[cur], buf[!cur], 2 * (size_t)X, &rs, &rr))) {
      rc = fail(err, errlen, rc, "passing k and v", comm_last_error(sp));
      goto done;
    }
    if ((rc = tensor_attention_block_backward(tc, &t[1], &dk, &dv, dout, &t[0], &k, &v, lse, &t[2], heads,
                                              (int64_t)r * Tl, (int64_t)j * Tl)))
      goto tfail;
    int w1 = comm_wait(&rs), w2 = comm_wait(&rr);
    if (!w1 && !w2 && size > 1) w1 = post(sp, buf[cur] + 2 * X, buf[!cur] + 2 * X, 2 * (size_t)X, &rs, &rr);
    if (!w1) w1 = comm_wait(&rs);
    if (!w1) w1 = comm_wait(&rr);
    if (w1 || w2) {
      rc = fail(err, errlen, w1 ? w1 : w2, "passing the blocks' gradients", comm_last_error(sp));
      goto done;
    }
  }
  /* after sp hops this rank's own block is back, its dk and dv complete */
  float *home = buf[size > 1 ? size & 1 : 0], *g = dqkv->data;
  add_back(g, t[1].data, B * Tl, (int)(3 * C), 0, (int)C);
  add_back(g, home + 2 * X, B * Tl, (int)(3 * C), (int)C, (int)C);
  add_back(g, home + 3 * X, B * Tl, (int)(3 * C), (int)(2 * C), (int)C);
  goto done;
tfail:
  rc = fail(err, errlen, rc, "blocks", tensor_last_error(tc));
done:
  comm_wait(&rs), comm_wait(&rr);
  free_all(tc, t, 5);
  return rc;
}
