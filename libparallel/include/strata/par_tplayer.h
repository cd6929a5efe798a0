/* strata/par_tplayer.h - one GPT transformer layer under any of the tensor
 * parallel modes: Megatron's 1D, Optimus' 2D, Tesseract's 2.5D and the 3D
 * layer of Bian et al. (arXiv 2105.14450).
 *
 * The layer is par_gpt's block, y = x + proj(attn(qkv(ln1(x)))), then
 * y += fcproj(gelu(fc(ln2(.)))), with the same parameter names and values
 * (initialisation by global index: "h.0.attn.qkv.w" of seed s is the serial
 * model's), its activations and parameters partitioned as each mode
 * partitions them (R = batch x seq rows, C = hidden):
 *
 *   1D   (tp ranks)  x whole on every rank; qkv and fc column-parallel, proj
 *        and fcproj row-parallel (Megatron's f and g: one allreduce of R x C
 *        in the forward, one in the backward, per pair); layernorms whole.
 *   2D   (q x q)     x in q x q blocks (rows by sequence, so attention stays
 *        on the rank: batch divisible by q); every weight in q x q blocks,
 *        products by SUMMA (strata/par_summa.h); the heads split over the
 *        mesh's columns (Optimus: the qkv weight's columns ordered so that
 *        column block j holds q, k and v of heads j H/q ..); layernorm
 *        statistics summed along the row, the bias and layernorm parameters
 *        held by column and replicated down it (their gradients summed over
 *        the column).
 *   2.5D (q x q x d) the 2D layer on each of d stacked meshes, the rows
 *        split over the depth too (batch divisible by d q); weights
 *        replicated over the depth and their gradients summed over it.
 *   3D   (q x q x q) rank (i, j, l) keeps rows piece (i q + j) and column
 *        block l of x; the first product of a pair (qkv, fc) is the 3D
 *        product (strata/par_mm3d.h), which leaves its output with rows
 *        piece (i q + l) and column block j, and the second (proj, fcproj)
 *        the 3D product with j and l exchanged, which brings it back: the
 *        residual stream keeps one partition (the layers of Bian et al.
 *        alternate so). Heads split over j; layernorm statistics summed
 *        along l; vector parameters replicated over the other two axes.
 *
 * Every mode talks to a few partners: 1D tp - 1, 2D 2 (q - 1), 2.5D
 * 2 (q - 1) + d - 1, 3D 3 (q - 1). The bytes a rank sends for one layer's
 * forward and backward are par_plan_tp_layer_sent (strata/par_plan.h).
 * fp32, on the CPU or (on_device) on a CUDA device: then the blocks passed
 * to forward and backward live there too, and nothing is staged through
 * the host but par_tplayer_get / set's whole tensors. */
#ifndef STRATA_PAR_TPLAYER_H
#define STRATA_PAR_TPLAYER_H

#include <stddef.h>
#include <stdint.h>
#include <strata/comm.h>
#include <strata/parallel.h>
#include <strata/status.h>
#include <strata/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct par_tplayer par_tplayer_t;

typedef struct {
  par_tp_mode_t mode;
  int depth;       /* 2.5D: meshes stacked (>= 1); 1 otherwise */
  int64_t batch;   /* sequences the tensor group works on together */
  int64_t seq;     /* tokens per sequence */
  int64_t hidden;  /* C */
  int64_t heads;
  uint64_t seed;   /* parameters drawn as par_gpt draws layer 0's */
  float init_std;  /* 0: 0.02 (the residual projections 0.02 / sqrt(2)) */
  int on_device;   /* 0 (default): the CPU; 1: parameters, activations and scratch on CUDA device `device`
                      (tc's device), GEMMs by cuBLAS, collectives through NCCL (libcomm sees device pointers) */
  int device;      /* the CUDA ordinal when on_device */
} par_tplayer_config_t;

/* The layer over the ranks of c (the tensor group: tp = comm_size(c)).
 * A shape the mode cannot partition (tp not a square, a q^2 d or a cube;
 * hidden, heads or batch not divisible) is STRATA_EINVAL naming the value.
 * Collective; c must outlive it. tc allocates and counts its memory. */
STRATA_API int par_tplayer_create(par_tplayer_t **out, comm_t *c, tensor_ctx_t *tc, const par_tplayer_config_t *cfg,
                                  char *err, size_t errlen);
STRATA_API void par_tplayer_destroy(par_tplayer_t *L);

/* The shape of this rank's block of the layer's input and output, and where
 * it lies in the whole R x C activation. */
STRATA_API void par_tplayer_block(const par_tplayer_t *L, int64_t *rows, int64_t *cols, int64_t *row0, int64_t *col0);

/* y (this rank's block) = the layer of x (this rank's block); keeps what
 * the backward needs. Collective. */
STRATA_API int par_tplayer_forward(par_tplayer_t *L, tensor_t *y, const tensor_t *x);
/* dx = dL/dx of this rank's block from dy = dL/dy of the last forward;
 * the parameters' gradients are added to. Collective. */
STRATA_API int par_tplayer_backward(par_tplayer_t *L, tensor_t *dx, const tensor_t *dy);
STRATA_API void par_tplayer_zero_grad(par_tplayer_t *L);

/* The names of the layer's parameters, as par_gpt names layer 0's without
 * "h.0." ("ln_1.w", "attn.qkv.w", ...); count and the global shape of one. */
STRATA_API int par_tplayer_nparams(void);
STRATA_API const char *par_tplayer_param_name(int i);
STRATA_API void par_tplayer_param_shape(const par_tplayer_t *L, int i, int64_t *rows, int64_t *cols);
/* The whole parameter i (grad: its gradient) in par_gpt's layout, on every
 * rank. Collective. */
STRATA_API int par_tplayer_get(par_tplayer_t *L, int i, int grad, float *whole);
/* This rank's part of parameter i from the whole (the same on every rank). */
STRATA_API int par_tplayer_set(par_tplayer_t *L, int i, const float *whole);

/* `steps` forwards and backwards on an input and an output gradient drawn
 * from the layer's seed (normal, unit variance), for measuring: the bytes
 * this rank sent and received over them and their seconds (any may be
 * NULL). Resets the traffic counters first. Collective. */
STRATA_API int par_tplayer_run(par_tplayer_t *L, int steps, uint64_t *sent, uint64_t *recv, double *seconds);

/* Bytes this rank sent and received on the layer's groups since the
 * creation or the last reset, and the distinct ranks it exchanged with. */
STRATA_API void par_tplayer_traffic(const par_tplayer_t *L, uint64_t *sent, uint64_t *recv);
STRATA_API void par_tplayer_traffic_reset(par_tplayer_t *L);
STRATA_API int par_tplayer_partners(const par_tplayer_t *L);

STRATA_API const char *par_tplayer_error(const par_tplayer_t *L);

#ifdef __cplusplus
}
#endif

#endif
