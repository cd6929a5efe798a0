/* strata/par_summa.h - 2D tensor parallelism's matrix product (SUMMA).
 *
 * Optimus (Xu et al. 2021, arXiv 2104.05343) splits a layer's activations
 * and weights into q x q blocks over a q x q mesh of tensor ranks and
 * multiplies them by SUMMA (van de Geijn and Watts 1997): rank (i, j), row
 * i and column j, holds block (i, j) of X (M x K: M/q x K/q), of W (K x N:
 * K/q x N/q) and of Y = X W. A rank talks to the 2 (q - 1) ranks of its row
 * and column only, against Megatron 1D's every rank of the group.
 *
 *   forward   Y_ij = sum_k X_ik W_kj: q steps, step k broadcasting X_ik
 *             along row i (from column k) and W_kj along column j (from
 *             row k);
 *   backward  dX_ik += sum_j dY_ij W_kj^T: step l broadcasts W_lj along
 *             column j, and the partial products dY_ij W_lj^T are reduced
 *             along row i to column l; dW_kj += sum_i X_ik^T dY_ij: step l
 *             broadcasts X_il along row i, and X_il^T dY_ij is reduced along
 *             column j to row l.
 *
 * Bytes per rank, with x, w, y the bytes of one block of X, W, Y: forward,
 * a rank sends x + w (it is root once in its row and once in its column)
 * and receives (q - 1)(x + w); backward, it sends w + x as roots and
 * (q - 1)(x + w) of partial products to the roots of its row and column
 * (libcomm's reduce counts the ring's (q - 1)/q of each block plus the
 * block to the root), and receives the same.
 *
 * 2.5D (Tesseract, Wang et al. 2021, arXiv 2105.14500): d such q x q
 * layers stacked, the rows of X (the batch) split over the d layers too
 * (a block is M/(d q) x K/q), W's blocks replicated over them; each layer
 * runs SUMMA on its rows, and the weight's gradient blocks are then summed
 * over the depth (an allreduce of w bytes among d ranks: 2 (d - 1)/d w
 * more sent in the backward). */
#ifndef STRATA_PAR_SUMMA_H
#define STRATA_PAR_SUMMA_H

#include <stddef.h>
#include <strata/comm.h>
#include <strata/status.h>
#include <strata/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct par_summa par_summa_t;

/* A q x q x depth mesh over c (q^2 depth ranks; else STRATA_EINVAL naming
 * the count): rank r of c is layer r / q^2, row r / q % q, column r % q.
 * depth 1: 2D. Collective; c must outlive it. */
STRATA_API int par_summa_create(par_summa_t **out, comm_t *c, int depth, char *err, size_t errlen);
STRATA_API void par_summa_destroy(par_summa_t *s);
/* This rank's row and column, and q; its layer and the depth. */
STRATA_API void par_summa_coords(const par_summa_t *s, int *row, int *col, int *q);
STRATA_API void par_summa_depth(const par_summa_t *s, int *layer, int *depth);
/* The communicators of this rank's row (ranks by column), column (ranks
 * by row) and depth (the ranks of its place in the other layers; NULL
 * when depth is 1). Borrowed. */
STRATA_API comm_t *par_summa_row(par_summa_t *s);
STRATA_API comm_t *par_summa_col(par_summa_t *s);
STRATA_API comm_t *par_summa_dep(par_summa_t *s);
/* y (M/q x N/q) = this rank's block of X W, from its blocks x (M/q x K/q)
 * and w (K/q x N/q): fp32, all on one device, the CPU or a CUDA device
 * (the blocks broadcast then through NCCL, libcomm counting the same
 * bytes). Collective over the mesh. */
STRATA_API int par_summa_forward(par_summa_t *s, tensor_ctx_t *tc, tensor_t *y, const tensor_t *x, const tensor_t *w);
/* dx += this rank's block of dY W^T, dw += its block of X^T dY (summed
 * over the layers under 2.5D; either may be NULL: its steps are skipped on
 * every rank alike). Collective. */
STRATA_API int par_summa_backward(par_summa_t *s, tensor_ctx_t *tc, tensor_t *dx, tensor_t *dw, const tensor_t *dy,
                                  const tensor_t *x, const tensor_t *w);
/* The last error's message ("" if none). */
STRATA_API const char *par_summa_error(const par_summa_t *s);

#ifdef __cplusplus
}
#endif

#endif
