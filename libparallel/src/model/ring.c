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

/* q, k and v of packed qkv (B, Tl, 3C) into q and kv (k then v, B Tl rows
 * each), on qkv's device. */
static int split_qkv(tensor_ctx_t *tc, tensor_t *q, float *kv, const tensor_t *qkv) {
  int64_t B = qkv->shape[0], Tl = qkv->shape[1], C = qkv->shape[2] / 3;
  tensor_t k = tensor_view3(kv, TENSOR_F32, qkv->device, B, Tl, C), v = k;
  v.data = kv + B * Tl * C;
  int rc = tensor_copy_columns(tc, q, 0, qkv, 0, C, 0);
  if (!rc) rc = tensor_copy_columns(tc, &k, 0, qkv, C, C, 0);
  if (!rc) rc = tensor_copy_columns(tc, &v, 0, qkv, 2 * C, C, 0);
  return rc;
}

/* Zeroed (B, rows, C) tensors on `device`, counted by tc's accountant. */
static int alloc3(tensor_ctx_t *tc, tensor_t *t, int device, int64_t B, int64_t rows, int64_t C) {
  int64_t s[3] = {B, rows, C};
  int rc = tensor_alloc(tc, t, TENSOR_F32, device, 3, s);
  return rc ? rc : tensor_zero(tc, t);
}

static void free_all(tensor_ctx_t *tc, tensor_t *t, int n) {
  for (int i = 0; i < n; i++) tensor_free(tc, &t[i]);
}

/* One hop: post the send of n floats at snd to rank + 1 and the receive into
 * rcv from rank - 1. On a device both go to NCCL as one group: every rank of the ring posts the same hops in the same order,
 * so each send meets its receive in call order, as NCCL pairs them. The
 * group is posted at once, after the work already queued (the block that
 * last read the buffer now received into), so that it overlaps the block
 * computed next. */
static int post(struct comm *sp, const float *snd, float *rcv, size_t n, comm_request_t **rs, comm_request_t **rr) {
  int size = comm_size(sp), r = comm_rank(sp), rc;
  if ((rc = comm_irecv(sp, rcv, n, COMM_F32, (r + size - 1) % size, 71, rr)) ||
      (rc = comm_isend(sp, snd, n, COMM_F32, (r + 1) % size, 71, rs)))
    return rc;
  return comm_flush(sp); /* on a device: under way while the block computes */
}

static int forward32(struct comm *sp, tensor_ctx_t *tc, tensor_t *out, tensor_t *lse, const tensor_t *qkv, int heads,
                     char *err, size_t errlen) {
  int size = comm_size(sp), r = comm_rank(sp), rc = STRATA_OK, dev = qkv->device;
  int64_t B = qkv->shape[0], Tl = qkv->shape[1], C = qkv->shape[2] / 3, X = B * Tl * C;
  tensor_t t[5] = {{0}}; /* q, two k|v buffers, m, l */
  comm_request_t *rs = NULL, *rr = NULL;
  int64_t sr[3] = {B, heads, Tl};
  if ((rc = alloc3(tc, &t[0], dev, B, Tl, C)) || (rc = alloc3(tc, &t[1], dev, B, 2 * Tl, C)) ||
      (rc = alloc3(tc, &t[2], dev, B, 2 * Tl, C)) || (rc = tensor_alloc(tc, &t[3], TENSOR_F32, dev, 3, sr)) ||
      (rc = tensor_alloc(tc, &t[4], TENSOR_F32, dev, 3, sr)) || (rc = tensor_zero(tc, &t[4]))) {
    rc = fail(err, errlen, rc, "buffers", tensor_last_error(tc));
    goto done;
  }
  float *kv[2] = {t[1].data, t[2].data};
  if ((rc = split_qkv(tc, &t[0], kv[0], qkv)) || (rc = tensor_fill(tc, &t[3], -INFINITY)) ||
      (rc = tensor_zero(tc, out)))
    goto tfail;
  for (int s = 0; s < size; s++) {
    int j = (r - s + size) % size, cur = s & 1;
    if (s + 1 < size && (rc = post(sp, kv[cur], kv[!cur], 2 * (size_t)X, &rs, &rr))) {
      rc = fail(err, errlen, rc, "passing k and v", comm_last_error(sp));
      goto done;
    }
    tensor_t k = tensor_view3(kv[cur], TENSOR_F32, dev, B, Tl, C);
    tensor_t v = tensor_view3(kv[cur] + X, TENSOR_F32, dev, B, Tl, C);
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

static int backward32(struct comm *sp, tensor_ctx_t *tc, tensor_t *dqkv, const tensor_t *dout, const tensor_t *qkv,
                      const tensor_t *out, const tensor_t *lse, int heads, char *err, size_t errlen) {
  int size = comm_size(sp), r = comm_rank(sp), rc = STRATA_OK, dev = qkv->device;
  int64_t B = qkv->shape[0], Tl = qkv->shape[1], C = qkv->shape[2] / 3, X = B * Tl * C;
  tensor_t t[5] = {{0}}; /* q, dq, d, two k|v|dk|dv buffers */
  comm_request_t *rs = NULL, *rr = NULL;
  int64_t sr[3] = {B, heads, Tl};
  if ((rc = alloc3(tc, &t[0], dev, B, Tl, C)) || (rc = alloc3(tc, &t[1], dev, B, Tl, C)) ||
      (rc = tensor_alloc(tc, &t[2], TENSOR_F32, dev, 3, sr)) || (rc = alloc3(tc, &t[3], dev, B, 4 * Tl, C)) ||
      (rc = alloc3(tc, &t[4], dev, B, 4 * Tl, C))) {
    rc = fail(err, errlen, rc, "buffers", tensor_last_error(tc));
    goto done;
  }
  float *buf[2] = {t[3].data, t[4].data};
  if ((rc = split_qkv(tc, &t[0], buf[0], qkv))) goto tfail; /* (dk, dv after k and v: zero) */
  if ((rc = tensor_attention_block_rowdot(tc, &t[2], dout, out, heads))) goto tfail;
  for (int s = 0; s < size; s++) {
    int j = (r - s + size) % size, cur = s & 1;
    tensor_t k = tensor_view3(buf[cur], TENSOR_F32, dev, B, Tl, C);
    tensor_t v = tensor_view3(buf[cur] + X, TENSOR_F32, dev, B, Tl, C);
    tensor_t dk = tensor_view3(buf[cur] + 2 * X, TENSOR_F32, dev, B, Tl, C);
    tensor_t dv = tensor_view3(buf[cur] + 3 * X, TENSOR_F32, dev, B, Tl, C);
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
  float *home = buf[size > 1 ? size & 1 : 0];
  tensor_t hk = tensor_view3(home + 2 * X, TENSOR_F32, dev, B, Tl, C), hv = hk;
  hv.data = home + 3 * X;
  if ((rc = tensor_copy_columns(tc, dqkv, 0, &t[1], 0, C, 1)) || (rc = tensor_copy_columns(tc, dqkv, C, &hk, 0, C, 1)) ||
      (rc = tensor_copy_columns(tc, dqkv, 2 * C, &hv, 0, C, 1)))
    goto tfail;
  goto done;
tfail:
  rc = fail(err, errlen, rc, "blocks", tensor_last_error(tc));
done:
  comm_wait(&rs), comm_wait(&rr);
  free_all(tc, t, 5);
  return rc;
}

/* ---- 16-bit activations ----
 * bf16 or f16 q/k/v (a model's 16-bit activations on a device): the blocks
 * run on f32 copies, as libtensor's attention runs f16 where cuDNN declines,
 * and the results are rounded back once: the output, or the gradient added
 * to dqkv. The k/v blocks then travel in f32 (twice the bytes of 16 bits).
 * f32 tensors go straight to the f32 ring, as before. */

/* An f32 copy of t (same shape, device), counted by tc's accountant. */
static int f32_copy(tensor_ctx_t *tc, tensor_t *dst, const tensor_t *t) {
  int rc = tensor_alloc(tc, dst, TENSOR_F32, t->device, t->ndim, t->shape);
  return rc ? rc : tensor_cast(tc, dst, t);
}

int par_ring_attention_forward(struct comm *sp, tensor_ctx_t *tc, tensor_t *out, tensor_t *lse, const tensor_t *qkv,
                               int heads, char *err, size_t errlen) {
  if (!sp || !tc || !out || !lse || !qkv) return STRATA_EINVAL;
  if (qkv->dtype == TENSOR_F32) return forward32(sp, tc, out, lse, qkv, heads, err, errlen);
  if (out->dtype != qkv->dtype)
    return fail(err, errlen, STRATA_EINVAL, "output", "not of the dtype of qkv (16-bit activations)");
  tensor_t q32 = {0}, o32 = {0};
  int rc = f32_copy(tc, &q32, qkv);
  if (!rc) rc = tensor_alloc(tc, &o32, TENSOR_F32, out->device, out->ndim, out->shape);
  if (rc) {
    rc = fail(err, errlen, rc, "f32 copies of the 16-bit blocks", tensor_last_error(tc));
  } else if (!(rc = forward32(sp, tc, &o32, lse, &q32, heads, err, errlen)) && (rc = tensor_cast(tc, out, &o32))) {
    rc = fail(err, errlen, rc, "the output in 16 bits", tensor_last_error(tc));
  }
  tensor_free(tc, &q32), tensor_free(tc, &o32);
  return rc;
}

int par_ring_attention_backward(struct comm *sp, tensor_ctx_t *tc, tensor_t *dqkv, const tensor_t *dout,
                                const tensor_t *qkv, const tensor_t *out, const tensor_t *lse, int heads, char *err,
                                size_t errlen) {
  if (!sp || !tc || !dqkv || !dout || !qkv || !out || !lse) return STRATA_EINVAL;
  if (qkv->dtype == TENSOR_F32) return backward32(sp, tc, dqkv, dout, qkv, out, lse, heads, err, errlen);
  if (dqkv->dtype != qkv->dtype || dout->dtype != qkv->dtype || out->dtype != qkv->dtype)
    return fail(err, errlen, STRATA_EINVAL, "gradients", "not all of the dtype of qkv (16-bit activations)");
  tensor_t t[4] = {{0}}; /* f32 qkv, out, dout, dqkv (which starts as dqkv: the gradient adds to it) */
  int rc = f32_copy(tc, &t[0], qkv);
  if (!rc) rc = f32_copy(tc, &t[1], out);
  if (!rc) rc = f32_copy(tc, &t[2], dout);
  if (!rc) rc = f32_copy(tc, &t[3], dqkv);
  if (rc) {
    rc = fail(err, errlen, rc, "f32 copies of the 16-bit blocks", tensor_last_error(tc));
  } else if (!(rc = backward32(sp, tc, &t[3], &t[2], &t[0], &t[1], lse, heads, err, errlen)) &&
             (rc = tensor_cast(tc, dqkv, &t[3]))) {
    rc = fail(err, errlen, rc, "the gradient in 16 bits", tensor_last_error(tc));
  }
  free_all(tc, t, 4);
  return rc;
}
