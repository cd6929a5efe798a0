/* The CUDA twins of libtensor's CPU kernels (the .cu files under src/cuda), C linkage.
 * Raw device pointers, sizes checked by the C front ends (the .c files under src) first.
 * Each returns a strata status and records CUDA/cuBLAS messages in ctx. */
#ifndef STRATA_TENSOR_CUDA_H
#define STRATA_TENSOR_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <strata/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Context access for the CUDA files (which cannot include the C11-atomics
 * context header from C++). */
void **tensor_ctx_cuda_state(tensor_ctx_t *ctx);
void **tensor_ctx_cublaslt(tensor_ctx_t *ctx);
int tensor_ctx_device(const tensor_ctx_t *ctx);
int tensor_ctx_bf16_matmul(const tensor_ctx_t *ctx);
int tensor_ctx_attention(const tensor_ctx_t *ctx);
int tensor_seterr(tensor_ctx_t *ctx, int code, const char *fmt, ...);

int tcu_device_count(void);
/* cudaGetDeviceProperties' name of `device` into name[len]; 0 or -1. */
int tcu_device_name(int device, char *name, size_t len);
/* cuDNN's version (e.g. 91900) once libcudnn.so.9 is loaded, 0 when it is absent. */
int tcu_cudnn_version(void);
/* Builds and finalizes cuDNN's tensor and operation descriptors of the
 * attention graph (sdpa_graph.h) without a device, so cuDNN itself checks its
 * dims, strides and types anywhere: 0 ok, 1 cuDNN absent, -1 refused (msg says
 * which descriptor and why). */
int tcu_sdpa_check_ops(int backward, int B, int T, int NH, int hs, char *msg, size_t len);
void tcu_ctx_destroy(tensor_ctx_t *ctx);
int tcu_sync(tensor_ctx_t *ctx);
/* A segment of device memory for the context's pool (alloc.cu): cudaMalloc
 * on `device`; STRATA_ENOMEM when the device is full (the CUDA error cleared,
 * so that the pool may retry), STRATA_EUNSUPPORTED without such a device. */
int tcu_reserve(tensor_ctx_t *ctx, int device, void **p, size_t bytes);
void tcu_release(int device, void *p);
/* Copies between any two devices (TENSOR_CPU for host). */
int tcu_memcpy(tensor_ctx_t *ctx, void *dst, int ddev, const void *src, int sdev, size_t bytes);
/* tcu_memcpy on the context's copy stream, after the work queued before on
 * the legacy stream; tcu_copy_wait waits for every copy queued there. */
int tcu_memcpy_async(tensor_ctx_t *ctx, void *dst, int ddev, const void *src, int sdev, size_t bytes);
int tcu_copy_wait(tensor_ctx_t *ctx);
int tcu_memset0(tensor_ctx_t *ctx, void *p, size_t bytes, int device);
int tcu_fill(tensor_ctx_t *ctx, void *p, int dtype, int64_t n, float value);
int tcu_cast(tensor_ctx_t *ctx, void *dst, int ddt, const void *src, int sdt, int64_t n);

/* Batched row-major GEMM: C_i = alpha op(A_i) op(B_i) + beta C_i; stride 0 shares an operand.
 * A/B dtype f32, bf16 or f16 (TENSOR_*); where one is 16-bit and the other
 * f32, the f32 one is rounded to the other's dtype in scratch (so that
 * bf16 activations meet f32 weights); C f32, bf16 or f16 (cdt); f32
 * accumulation always. */
int tcu_gemm(tensor_ctx_t *ctx, int ta, int tb, int M, int N, int K, float alpha, const void *A,
             int adt, int lda, int64_t sa, const void *B, int bdt, int ldb, int64_t sb, float beta,
             void *C, int cdt, int ldc, int64_t sc, int batch);
/* Linear layers through cuBLASLt's epilogues (gemm_lt.cu); row-major,
 * weight W (N,K), in and dout row-major (rows,K) and (rows,N). Each returns
 * STRATA_EUNSUPPORTED, writing nothing and recording no error, where
 * cuBLASLt has no kernel (dims not multiples of 8, pointers not 16-byte
 * aligned, ...): the caller then runs the separate kernels.
 * out = act(in W^T + bias) with act GELU (tanh form) when gelu, pre (gelu
 * only) = the pre-activation, of out's dtype odt (f32, or in's 16-bit
 * dtype); in of dtype idt (f32, bf16 or f16), W of idt or f32 (rounded to
 * idt); bias f32, may be NULL with gelu. */
int tcu_linear_lt(tensor_ctx_t *ctx, void *out, void *pre, int odt, const void *in, int idt, const void *w,
                  int wdt, const float *bias, int64_t rows, int N, int K, int gelu);
/* dpre(rows,K) = gelu'(pre) * (dout W), overwritten; dpre, dout, pre of
 * dtype adt, W of adt or f32. */
int tcu_linear_dgelu_lt(tensor_ctx_t *ctx, void *dpre, const void *dout, int adt, const void *w, int wdt,
                        const void *pre, int64_t rows, int N, int K);
/* dW += dout^T in; dbias = column sums of dout (overwritten); dout and in
 * of dtype adt, dW and dbias f32. */
int tcu_linear_wgrad_lt(tensor_ctx_t *ctx, float *dw, float *dbias, const void *dout, const void *in, int adt,
                        int64_t rows, int N, int K);
void tcu_lt_destroy(tensor_ctx_t *ctx);
/* The element-wise kernels, layernorm, embedding and attention take their
 * activations (every (rows, C)-like operand; `adt`: f32, bf16 or f16, one
 * dtype per call) as void pointers; parameters, their gradients and row
 * statistics (mean, rstd, lse) are f32; every sum runs in f32. */
int tcu_bias_forward(tensor_ctx_t *ctx, void *out, const void *in, int adt, const float *bias,
                     int64_t rows, int N);
int tcu_bias_backward(tensor_ctx_t *ctx, float *dbias, const void *dout, int adt, int64_t rows, int N);
int tcu_add(tensor_ctx_t *ctx, void *out, const void *a, const void *b, int adt, int64_t n);
int tcu_acc(tensor_ctx_t *ctx, void *dst, const void *src, int adt, int64_t n);
int tcu_layernorm_forward(tensor_ctx_t *ctx, void *out, float *mean, float *rstd, const void *in, int adt,
                          const float *w, const float *b, int64_t rows, int C, float eps);
int tcu_layernorm_backward(tensor_ctx_t *ctx, void *din, float *dw, float *db, const void *dout,
                           const void *in, int adt, const float *w, const float *mean, const float *rstd,
                           int64_t rows, int C);
int tcu_gelu_forward(tensor_ctx_t *ctx, void *out, const void *in, int adt, int64_t n);
int tcu_gelu_backward(tensor_ctx_t *ctx, void *din, const void *dout, const void *in, int adt, int64_t n);
int tcu_attention_decode(tensor_ctx_t *ctx, float *out, const float *q, const float *k, const float *v,
                         int B, int Tmax, int C, int NH, int len);
/* 16-bit activations (adt bf16 or f16) go to cuDNN (bf16 only, as they
 * are); where it declines, STRATA_EUNSUPPORTED with no error recorded, and
 * the caller runs the f32 kernel on f32 copies. */
int tcu_attention_forward(tensor_ctx_t *ctx, void *out, float *lse, const void *qkv, int adt, int B, int T,
                          int C, int NH);
int tcu_attention_backward(tensor_ctx_t *ctx, void *dqkv, const void *dout, const void *qkv,
                           const void *out, int adt, const float *lse, int B, int T, int C, int NH);
/* columns.cu: dst[r, d0 + c] (+)= src[r, s0 + c], r < rows, c < n; widths Wd and Ws. */
int tcu_copy_columns(tensor_ctx_t *ctx, float *dst, int64_t Wd, int64_t d0, const float *src, int64_t Ws, int64_t s0,
                     int64_t n, int64_t rows, int accumulate);
/* attention_block.cu: the blockwise attention of ring self-attention (the
 * tensor_attention_block_* front ends in attention_block.c). */
int tcu_attention_block_forward(tensor_ctx_t *ctx, float *acc, float *m, float *l, const float *q, const float *k,
                                const float *v, int B, int Tq, int Tk, int C, int NH, int64_t q0, int64_t k0);
int tcu_attention_block_finish(tensor_ctx_t *ctx, float *out, float *lse, const float *acc, const float *m,
                               const float *l, int B, int T, int C, int NH);
int tcu_attention_block_rowdot(tensor_ctx_t *ctx, float *d, const float *dout, const float *out, int B, int T, int C,
                               int NH);
int tcu_attention_block_backward(tensor_ctx_t *ctx, float *dq, float *dk, float *dv, const float *dout,
                                 const float *q, const float *k, const float *v, const float *lse, const float *D,
                                 int B, int Tq, int Tk, int C, int NH, int64_t q0, int64_t k0);
int tcu_embedding_forward(tensor_ctx_t *ctx, void *out, int adt, const int32_t *ids, const float *wte,
                          const float *wpe, int B, int T, int C, int V, int64_t lo, int slice);
int tcu_embedding_backward(tensor_ctx_t *ctx, float *dwte, float *dwpe, const void *dout, int adt,
                           const int32_t *ids, int B, int T, int C, int V, int64_t lo);
int tcu_xent_forward(tensor_ctx_t *ctx, float *losses, float *lse, const float *logits,
                     const int32_t *targets, int64_t rows, int V);
int tcu_xent_backward(tensor_ctx_t *ctx, float *dlogits, const float *logits, const float *lse,
                      const int32_t *targets, int64_t rows, int V, float dloss, int64_t lo, int slice);
int tcu_xent_slice_forward(tensor_ctx_t *ctx, float *lse, float *zt, const float *logits, const int32_t *targets,
                           int64_t rows, int V, int64_t lo);
/* xent_combine.cu: lse and losses of R rows from the t slices' lse (parts,
 * (t, R)) and the summed target logits zt (losses may be zt). */
int tcu_xent_slice_combine(tensor_ctx_t *ctx, float *lse, float *losses, const float *parts, const float *zt,
                           const int32_t *targets, int64_t t, int64_t R);
/* The fused classifier's row kernel (classifier.c) over n rows of f32
 * logits z (n, V): lse, losses (may be NULL) and, when dz is given, dz =
 * dloss (softmax - onehot) in dtype dz_dt (f32: dz may be z itself, row by
 * row in place; bf16, f16); a row with target < 0 gets loss 0 and dz 0. A target
 * >= V raises the device flag, which tcu_classifier_check reads back once
 * (STRATA_EINVAL) after the chunks. */
int tcu_classifier_rows(tensor_ctx_t *ctx, float *losses, float *lse, void *dz, int dz_dt, const float *z,
                        const int32_t *targets, int64_t n, int V, float dloss);
int tcu_classifier_check(tensor_ctx_t *ctx, int V);
/* resid = a + b, out = layernorm(resid) (mean, rstd saved); one warp a row. */
int tcu_residual_layernorm_forward(tensor_ctx_t *ctx, void *resid, void *out, float *mean, float *rstd,
                                   const void *a, const void *b, int adt, const float *w, const float *bias,
                                   int64_t rows, int C, float eps);
/* layernorm_split.cu: the phases of tensor_layernorm_split_* over R rows
 * of A columns (C the whole rows'), and the 2-D transpose (r x c in). */
int tcu_layernorm_split_forward(tensor_ctx_t *ctx, float *out, float *mean, float *rstd, const float *in,
                                const float *w, const float *b, int64_t R, int64_t A, int64_t C, float eps,
                                int phase);
int tcu_layernorm_split_backward(tensor_ctx_t *ctx, float *din, float *dw, float *db, float *stats,
                                 const float *dout, const float *in, const float *w, const float *mean,
                                 const float *rstd, int64_t R, int64_t A, int64_t C, int phase);
int tcu_transpose(tensor_ctx_t *ctx, float *out, const float *in, int64_t r, int64_t c, int accumulate);
/* out = in * mask / (1-p) (accumulate: out += ...), mask from Philox(key, offset + i). */
int tcu_dropout(tensor_ctx_t *ctx, float *out, const float *in, int64_t n, float p,
                const uint32_t key[2], int64_t offset, int accumulate);

#ifdef __cplusplus
}
#endif

#endif
