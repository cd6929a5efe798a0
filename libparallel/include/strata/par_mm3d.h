/* strata/par_mm3d.h - 3D tensor parallelism's matrix product.
 *
 * Bian et al. 2021 (arXiv 2105.14450), after Agarwal et al.'s 3D matrix
 * product: q^3 ranks on a cube, rank (i, j, l). For Y = X W (X M x K, W
 * K x N, Y M x N cut in q x q blocks), rank (i, j, l) computes the partial
 * product X_il W_lj, whose sum over l is Y_ij. Nothing is replicated: rank
 * (i, j, l) keeps piece j (of q, by rows) of X_il, piece i of W_lj and
 * piece l of Y_ij, each M/q^2 x K/q, K/q^2 x N/q and M/q^2 x N/q.
 *
 *   forward   all-gather X_il along j and W_lj along i; multiply;
 *             reduce-scatter the product along l (each rank its rows of Y_ij);
 *   backward  all-gather dY_ij along l (and X_il, W_lj again); dX_il =
 *             sum_j dY_ij W_lj^T reduce-scattered along j, dW_lj = sum_i
 *             X_il^T dY_ij along i.
 *
 * A rank talks to 3 (q - 1) others. Bytes sent per rank, with a, b, c the
 * bytes of one whole block of X, W, Y: forward (q - 1)/q (a + b + c),
 * backward (q - 1)/q (2a + 2b + c): three all-gathers and two
 * reduce-scatters (the ring algorithms' volumes). */
#ifndef STRATA_PAR_MM3D_H
#define STRATA_PAR_MM3D_H

#include <stddef.h>
#include <strata/comm.h>
#include <strata/status.h>
#include <strata/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct par_mm3d par_mm3d_t;

/* A q x q x q cube over c (q^3 ranks; else STRATA_EINVAL naming the count):
 * rank r of c is i = r / q^2, j = r / q % q, l = r % q. Collective. */
STRATA_API int par_mm3d_create(par_mm3d_t **out, comm_t *c, char *err, size_t errlen);
STRATA_API void par_mm3d_destroy(par_mm3d_t *m);
/* This rank's (i, j, l) and q. */
STRATA_API void par_mm3d_coords(const par_mm3d_t *m, int *i, int *j, int *l, int *q);
/* The groups along each axis: "i", "j" or "l" (borrowed). */
STRATA_API comm_t *par_mm3d_axis(par_mm3d_t *m, const char *axis);
/* y (M/q^2 x N/q) = this rank's piece of X W from its pieces x (M/q^2 x
 * K/q) and w (K/q^2 x N/q): fp32, all on one device, the CPU or a CUDA
 * device (the gathers and reduce-scatters then through NCCL, libcomm
 * counting the same bytes). Collective. */
STRATA_API int par_mm3d_forward(par_mm3d_t *m, tensor_ctx_t *tc, tensor_t *y, const tensor_t *x, const tensor_t *w);
/* dx += this rank's piece of dY W^T, dw += its piece of X^T dY. Collective. */
STRATA_API int par_mm3d_backward(par_mm3d_t *m, tensor_ctx_t *tc, tensor_t *dx, tensor_t *dw, const tensor_t *dy,
                                 const tensor_t *x, const tensor_t *w);
/* The same product keeping the forward's gathered X_il and W_lj for the
 * backward, which then gathers dY alone: Bian et al.'s accounting,
 * (q - 1)/q (2a + 2b + 2c) bytes sent per rank in all, for a whole block
 * of X and of W more memory per product. keep (zeroed by the caller) is
 * freed by par_mm3d_saved_free or a following forward into it. */
typedef struct {
  tensor_t x, w;
} par_mm3d_saved_t;
STRATA_API int par_mm3d_forward_saved(par_mm3d_t *m, tensor_ctx_t *tc, tensor_t *y, const tensor_t *x, const tensor_t *w,
                                      par_mm3d_saved_t *keep);
STRATA_API int par_mm3d_backward_saved(par_mm3d_t *m, tensor_ctx_t *tc, tensor_t *dx, tensor_t *dw, const tensor_t *dy,
                                       const par_mm3d_saved_t *keep);
STRATA_API void par_mm3d_saved_free(tensor_ctx_t *tc, par_mm3d_saved_t *keep);
STRATA_API const char *par_mm3d_error(const par_mm3d_t *m);

#ifdef __cplusplus
}
#endif

#endif
