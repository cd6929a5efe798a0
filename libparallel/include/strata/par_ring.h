/* strata/par_ring.h - ring self-attention (sequence parallelism).
 *
 * Li et al. 2021, "Sequence Parallelism: Long Sequence Training from
 * System Perspective" (arXiv 2105.13120): the tokens of every sequence are
 * split over a group of sp ranks, rank r holding [r Tl, (r + 1) Tl); its
 * queries stay, and the key and value blocks travel around the ring, the
 * softmax computed across blocks (libtensor's blockwise attention, the
 * online softmax of FlashAttention) without a score matrix larger than
 * Tl x Tl. */
#ifndef STRATA_PAR_RING_H
#define STRATA_PAR_RING_H

#include <stddef.h>
#include <strata/comm.h>
#include <strata/status.h>
#include <strata/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The attention over the sequence-split group sp (rank r holds tokens
 * [r Tl, (r + 1) Tl) of every sequence): tensor_attention_forward /
 * _backward's contract on this rank's
 * tokens (qkv (B, Tl, 3C), out (B, Tl, C), lse (B, NH, Tl); dqkv
 * accumulated), the causal attention over the whole sequence. Queries stay;
 * key and value blocks travel the ring, the softmax runs across blocks
 * (online, FlashAttention's), no score matrix larger than Tl x Tl. Each rank
 * sends (sp - 1) 2 B Tl C floats in the forward and (4 sp - 2) B Tl C in the
 * backward (none with sp = 1). qkv, out, dout, dqkv f32, or all bf16 or all
 * f16 on a device (16-bit activations: the blocks then run on f32 copies,
 * allocated through tc for the call, and the k/v blocks still travel as f32;
 * the output, or dqkv's sum, is rounded once); lse f32. Collective over sp;
 * err (errlen bytes) says what failed. */
STRATA_API int par_ring_attention_forward(struct comm *sp, tensor_ctx_t *tc, tensor_t *out, tensor_t *lse,
                                          const tensor_t *qkv, int heads, char *err, size_t errlen);
STRATA_API int par_ring_attention_backward(struct comm *sp, tensor_ctx_t *tc, tensor_t *dqkv, const tensor_t *dout,
                                           const tensor_t *qkv, const tensor_t *out, const tensor_t *lse, int heads,
                                           char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
