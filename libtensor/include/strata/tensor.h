/* strata/tensor.h: libtensor, the tensors and the operations a GPT needs.
 *
 * A tensor_t is a plain descriptor (data pointer, up to 4 dims, dtype, device),
 * not an opaque handle: a model keeps its parameters and gradients in one flat
 * allocation and looks at pieces of it through views that cost nothing to make
 * (tensor_view). Memory that libtensor allocates (tensor_alloc) is counted by
 * the context's memory accountant, per device.
 *
 * Every operation comes as a forward/backward pair with the argument order
 * context, outputs, inputs, weights, sizes. Forward overwrites its outputs;
 * backward ACCUMULATES (+=) into its gradient outputs, and any gradient output
 * may be NULL when the caller does not need it. The device is a run-time
 * property of the tensors: all tensors of one call must live on the same
 * device, otherwise the call fails with STRATA_ESHAPE. A CUDA tensor on a
 * build without CUDA gives STRATA_EUNSUPPORTED.
 *
 * Errors: every fallible call returns 0 or a negative strata status, and the
 * context keeps a message naming the offending shapes/values
 * (tensor_last_error). Nothing here exits or aborts on bad input.
 *
 * Dtypes: the ops take f32 (another dtype is STRATA_ESHAPE); bf16/f16 serve
 * storage, copies, fills and casts, and on CUDA the inputs of matmul/linear
 * (f32 accumulation; the same request on the CPU is STRATA_EUNSUPPORTED:
 * cast first); i32 holds token ids and targets.
 * 16-bit activations (CUDA only): the linear layers (and linear_act), bias
 * and residual adds, layernorm (and residual_layernorm), GELU, attention,
 * embedding and the fused classifier also take their activations and
 * activation gradients (in, out, pre, din, dout, qkv, h, dh, ...) all bf16
 * or all f16 in one call, while parameters (weights, biases, layernorm and
 * embedding tables), their gradients and the row statistics (mean, rstd,
 * lse, losses) stay f32. Every kernel loads the 16-bit values into f32,
 * accumulates in f32 and rounds what it stores (round to nearest even); an
 * f32 weight meets 16-bit activations rounded to their dtype in the GEMM
 * (whose output may be 16-bit or f32). Attention sends bf16 q, k, v to
 * cuDNN as they are; f16 (or no cuDNN) runs strata's f32 kernel on f32
 * copies. On the CPU a 16-bit activation is STRATA_EUNSUPPORTED.
 *
 * Threads: the context owns the CPU cores. It runs OpenMP regions of
 * `threads` threads and, inside them, single-threaded OpenBLAS on per-thread
 * blocks of every GEMM, so OpenMP and OpenBLAS never compete for the cores
 * (Debian's OpenBLAS is the pthread build; its idle threads spin). Creating a
 * context therefore sets OpenBLAS to one thread for the whole process. */
#ifndef STRATA_TENSOR_H
#define STRATA_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <strata/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TENSOR_MAX_DIMS 4
#define TENSOR_CPU (-1) /* device id of host memory; cuda:N is device N >= 0 */
#define TENSOR_MAX_DEVICES 16

typedef enum { TENSOR_F32 = 0, TENSOR_BF16 = 1, TENSOR_F16 = 2, TENSOR_I32 = 3 } tensor_dtype_t;

/* A contiguous row-major tensor. `owned` is set by tensor_alloc only; views
 * have owned = 0 and tensor_free leaves their memory alone. */
typedef struct {
  void *data;
  int64_t shape[TENSOR_MAX_DIMS];
  int ndim;             /* 1..4 (0 means "no tensor") */
  tensor_dtype_t dtype;
  int device;           /* TENSOR_CPU or a CUDA ordinal */
  int owned;
} tensor_t;

/* ---- context ------------------------------------------------------------
 * A context is used by one thread at a time (it holds scratch memory and the
 * last error); give each thread that calls libtensor its own. */

typedef struct tensor_ctx tensor_ctx_t;

/* How device memory is obtained (see tensor_memory_stats). */
typedef enum {
  TENSOR_CUDA_ALLOC_AUTO = 0,   /* the environment's STRATA_CUDA_ALLOC (cache or direct);
                                   cache when it is unset */
  TENSOR_CUDA_ALLOC_CACHE = 1,  /* a caching allocator: freed blocks are kept and reused */
  TENSOR_CUDA_ALLOC_DIRECT = 2, /* cudaMalloc and cudaFree per tensor (for debugging) */
} tensor_cuda_alloc_t;

typedef struct {
  int threads; /* CPU threads for every op; 0: OpenMP's default (omp_get_max_threads) */
  int device;  /* default CUDA device for the context's cuBLAS handle and streams */
  int bf16_matmul; /* CUDA only: f32 matmuls run cuBLAS with bf16 inputs and f32
                      accumulation (inputs rounded to bf16 on the fly) */
  tensor_cuda_alloc_t cuda_alloc;
  int attention;   /* CUDA only: which causal attention kernel runs (tensor_attention_t) */
} tensor_ctx_options_t;
#define TENSOR_CTX_OPTIONS_DEFAULTS                                                                \
  {.threads = 0, .device = 0, .bf16_matmul = 0, .cuda_alloc = TENSOR_CUDA_ALLOC_AUTO, .attention = 0}

/* The CUDA attention kernels. strata's own is f32 throughout and exact
 * against the CPU; cuDNN's fused flash attention (cuDNN 9, loaded at run time
 * from libcudnn.so.9) runs on tensor cores with Q, K, V, O, dO and the
 * gradients rounded to bf16, f32 accumulation and f32 row statistics.
 * AUTO: the environment variable STRATA_ATTENTION=own|cudnn decides for
 * contexts with bf16_matmul, which otherwise use cuDNN when it loads; f32
 * contexts use strata's kernel. CUDNN asks for cuDNN on any context. Where
 * cuDNN is absent, or has no engine for a shape, strata's kernel runs (one
 * line on stderr says so, once). */
typedef enum { TENSOR_ATTENTION_AUTO = 0, TENSOR_ATTENTION_OWN = 1, TENSOR_ATTENTION_CUDNN = 2 } tensor_attention_t;

/* Creates a context (NULL options = defaults). Caller destroys it. */
STRATA_API int tensor_ctx_create(tensor_ctx_t **ctx, const tensor_ctx_options_t *opts);
/* Destroys a context; NULL is a no-op. Tensors allocated from it must be freed first. */
STRATA_API void tensor_ctx_destroy(tensor_ctx_t *ctx);
/* The last error message of this context ("" if none); owned by the context. */
STRATA_API const char *tensor_last_error(const tensor_ctx_t *ctx);
/* A short description of a status code; never NULL. */
STRATA_API const char *tensor_strerror(int code);
/* CPU threads the context uses. */
STRATA_API int tensor_ctx_threads(const tensor_ctx_t *ctx);
/* Number of CUDA devices usable by this build (0 without CUDA or GPU). */
STRATA_API int tensor_cuda_device_count(void);
/* The name of CUDA device `device` as the runtime reports it (for example
 * "NVIDIA H100 80GB HBM3") into name[len] (always terminated, "" on
 * failure); STRATA_EUNSUPPORTED on a build without CUDA or where there is
 * no such device. */
STRATA_API int tensor_cuda_device_name(int device, char *name, size_t len);
/* A GPU's dense bf16 tensor-core peak (fp32 accumulation) in FLOP/s from
 * its vendor's spec sheet, by the name tensor_cuda_device_name gives; 0 for
 * a device not in the table (H100 NVL, H200 NVL and others of other clocks
 * included): measure it then. Model FLOPs utilisation (MFU) as PaLM defines
 * it (Chowdhery et al., arXiv 2204.02311, appendix B) divides by this.
 * The sheets quote the sparse rate beside the dense one; these are dense:
 * H100 SXM5 989.4 and H100 PCIe 756.5 TFLOP/s (NVIDIA H100 datasheet,
 * 1,979 / 1,513 "with sparsity"); H200 989.4 (H200 datasheet, SXM); A100
 * 312 (A100 datasheet, 624 with sparsity); L40S 362.05 (L40S datasheet);
 * GeForce RTX 4090 165.2 (Ada Lovelace whitepaper, appendix A, FP16/BF16
 * tensor with FP32 accumulate). Pure: no device needed. */
STRATA_API double tensor_cuda_table_peak(const char *name);
/* The version of the cuDNN library attention can use (e.g. 91900 for 9.19.0),
 * loaded on first call; 0 on builds without CUDA or where libcudnn.so.9 is
 * absent. */
STRATA_API int tensor_cudnn_version(void);
/* Waits for all queued device work of the context (no-op on CPU). */
STRATA_API int tensor_synchronize(tensor_ctx_t *ctx);

/* ---- memory accountant ---------------------------------------------------- */

/* Current and peak bytes allocated through this context on `device`
 * (TENSOR_CPU or a CUDA ordinal). Either pointer may be NULL. */
STRATA_API int tensor_memory(const tensor_ctx_t *ctx, int device, size_t *current, size_t *peak);
/* Caps the bytes allocated through this context on `device` (0: no cap):
 * a tensor_alloc beyond it fails with STRATA_ENOMEM, as a device of that
 * size would (on the CPU it stands in for a GPU's memory). */
STRATA_API int tensor_memory_set_limit(tensor_ctx_t *ctx, int device, size_t bytes);
/* Host bytes the context keeps as per-thread scratch between calls (the
 * score blocks of attention, for instance), outside the accountant. */
STRATA_API size_t tensor_scratch_bytes(const tensor_ctx_t *ctx);
/* Sets the peaks of `device` (allocated and reserved) to their current values. */
STRATA_API void tensor_memory_reset_peak(tensor_ctx_t *ctx, int device);

/* Device memory goes through a caching allocator (in the manner of PyTorch's
 * CUDACachingAllocator): tensor_free keeps the block for the next
 * tensor_alloc instead of calling cudaFree, so `reserved` (what cudaMalloc
 * holds) is at least `allocated` (what tensors hold, the accountant's
 * numbers, as on the CPU). When cudaMalloc fails, the cached blocks are
 * released and it is tried once more. Blocks are reused in the order of the
 * context's single stream; free a tensor only after any communication on
 * another stream that uses it has been waited for. cuBLAS workspace and the
 * context's own scratch are outside these numbers. */
typedef struct {
  size_t allocated, allocated_peak; /* bytes tensors hold now / at most (tensor_memory) */
  size_t reserved, reserved_peak;   /* bytes held from cudaMalloc (CPU: = allocated) */
  size_t cached;                    /* reserved bytes in free blocks */
  int64_t segments;                 /* cudaMalloc'd segments held */
  int64_t cuda_mallocs, cuda_frees; /* calls so far */
  int64_t retries; /* times a full device made the cache go back before a retry */
} tensor_memory_stats_t;

/* The memory statistics of `device` (TENSOR_CPU or a CUDA ordinal). */
STRATA_API int tensor_memory_stats(const tensor_ctx_t *ctx, int device, tensor_memory_stats_t *stats);
/* Gives the cached blocks of `device` that hold no tensor back to CUDA
 * (no-op on the CPU). */
STRATA_API int tensor_memory_empty_cache(tensor_ctx_t *ctx, int device);

/* ---- tensors --------------------------------------------------------------- */

/* Allocates a zero-filled tensor on `device` and counts it. Caller frees it
 * with tensor_free. */
STRATA_API int tensor_alloc(tensor_ctx_t *ctx, tensor_t *t, tensor_dtype_t dtype, int device,
                            int ndim, const int64_t *shape);
/* Frees an owned tensor and clears the descriptor; views are just cleared.
 * Pass the context that allocated it (its accountant and, on a device, its
 * memory pool hold the tensor). */
STRATA_API void tensor_free(tensor_ctx_t *ctx, tensor_t *t);
/* Makes a view over memory the caller owns (borrowed; nothing is copied). */
STRATA_API tensor_t tensor_view(void *data, tensor_dtype_t dtype, int device, int ndim,
                                const int64_t *shape);
/* View helpers of 1..4 dims. */
STRATA_API tensor_t tensor_view1(void *data, tensor_dtype_t dtype, int device, int64_t d0);
STRATA_API tensor_t tensor_view2(void *data, tensor_dtype_t dtype, int device, int64_t d0,
                                 int64_t d1);
STRATA_API tensor_t tensor_view3(void *data, tensor_dtype_t dtype, int device, int64_t d0,
                                 int64_t d1, int64_t d2);
STRATA_API tensor_t tensor_view4(void *data, tensor_dtype_t dtype, int device, int64_t d0,
                                 int64_t d1, int64_t d2, int64_t d3);
STRATA_API int64_t tensor_numel(const tensor_t *t);
STRATA_API size_t tensor_dtype_size(tensor_dtype_t dtype);
STRATA_API size_t tensor_nbytes(const tensor_t *t);
/* Writes "f32[4,64,768]@cpu" into buf (always terminated); returns buf. */
STRATA_API char *tensor_describe(const tensor_t *t, char *buf, size_t len);

/* dst = src, same dtype and element count, any two devices. */
STRATA_API int tensor_copy(tensor_ctx_t *ctx, tensor_t *dst, const tensor_t *src);
/* tensor_copy queued on the context's copy stream, after the work queued
 * on the context's stream before the call and without holding up the work
 * queued there after it (a transfer between the host and a device then
 * overlaps computation; host memory must be pinned for that, as
 * liboffload's host tier is). dst and src must stay untouched, and dst
 * unread, until tensor_copy_wait. Host to host: a copy at once. */
STRATA_API int tensor_copy_async(tensor_ctx_t *ctx, tensor_t *dst, const tensor_t *src);
/* Waits for every copy tensor_copy_async queued on ctx (no-op when none). */
STRATA_API int tensor_copy_wait(tensor_ctx_t *ctx);
/* dst = (dtype of dst) src: casts between f32, bf16 and f16 (round to nearest
 * even); same shape and device. */
STRATA_API int tensor_cast(tensor_ctx_t *ctx, tensor_t *dst, const tensor_t *src);
/* Columns [s0, s0 + n) of src into columns [d0, d0 + n) of dst, both f32
 * on one device and viewed as rows x their last dimension (the same number
 * of rows): copied, or added to dst when `accumulate` (for splitting packed
 * q|k|v rows and adding gradients back into them). STRATA_ESHAPE names a
 * range past a width or rows that differ. */
STRATA_API int tensor_copy_columns(tensor_ctx_t *ctx, tensor_t *dst, int64_t d0, const tensor_t *src, int64_t s0,
                                   int64_t n, int accumulate);
/* t = 0. */
STRATA_API int tensor_zero(tensor_ctx_t *ctx, tensor_t *t);
/* t = value (float dtypes). */
STRATA_API int tensor_fill(tensor_ctx_t *ctx, tensor_t *t, float value);

/* ---- counter-based random numbers ---------------------------------------------
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11, section 3.2), keyed by (seed, name) and counted by the GLOBAL element
 * index. A shard of a global tensor is described by the global shape and the
 * shard's start in every dim (a tensor_slice_t); filling it yields exactly the
 * values of the whole tensor at those indices. NULL slice = the tensor is the
 * whole global tensor. */
typedef struct {
  int ndim;                         /* dims of the global tensor (== t->ndim) */
  int64_t shape[TENSOR_MAX_DIMS];   /* global shape */
  int64_t start[TENSOR_MAX_DIMS];   /* where the shard starts in each dim */
} tensor_slice_t;

/* The raw generator: 4 x 32 random bits for (key, counter). */
STRATA_API void tensor_philox(uint32_t out[4], const uint32_t key[2], const uint32_t ctr[4]);
/* The key of (seed, name); name may be NULL. */
STRATA_API void tensor_rng_key(uint32_t key[2], uint64_t seed, const char *name);
/* t = mean + std * N(0,1) per element. */
STRATA_API int tensor_fill_normal(tensor_ctx_t *ctx, tensor_t *t, uint64_t seed, const char *name,
                                  const tensor_slice_t *slice, float mean, float std);
/* t = U[lo, hi) per element. */
STRATA_API int tensor_fill_uniform(tensor_ctx_t *ctx, tensor_t *t, uint64_t seed, const char *name,
                                   const tensor_slice_t *slice, float lo, float hi);

/* ---- operations (f32; CPU and CUDA) --------------------------------------------
 * Shapes use B batch, T time, C channels, NH heads, V vocabulary. */

/* C = alpha op(A) op(B) + beta C, op = transpose when trans_* != 0. A, B, C
 * have 2..4 dims; leading dims are batch dims and must match C's, except that
 * a 2-D B is shared by every batch (weights). A: (..,M,K) or (..,K,M); B:
 * (..,K,N) or (..,N,K); C: (..,M,N). On CUDA, bf16 or f16 A/B (both the
 * same dtype) with f32 C run cuBLAS with f32 accumulation. */
STRATA_API int tensor_matmul(tensor_ctx_t *ctx, tensor_t *c, const tensor_t *a, const tensor_t *b,
                             int trans_a, int trans_b, float alpha, float beta);
/* Backward of C = op(A) op(B) (alpha 1): dA += dC op(B)^T.., dB += ...; either
 * gradient may be NULL. */
STRATA_API int tensor_matmul_backward(tensor_ctx_t *ctx, tensor_t *da, tensor_t *db,
                                      const tensor_t *dc, const tensor_t *a, const tensor_t *b,
                                      int trans_a, int trans_b);

/* Linear layer: out(..,N) = in(..,K) weight(N,K)^T + bias(N) (bias may be NULL).
 * On CUDA, in and weight may both be bf16 or f16 (f32 accumulation and out);
 * the bias is added in the GEMM's epilogue (cuBLASLt) where it can be. */
STRATA_API int tensor_linear_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *in,
                                     const tensor_t *weight, const tensor_t *bias);
/* din += dout W, dweight += dout^T in, dbias += sum of dout rows. On CUDA,
 * dweight and dbias come from one cuBLASLt GEMM (CUBLASLT_EPILOGUE_BGRADB)
 * where it can. */
STRATA_API int tensor_linear_backward(tensor_ctx_t *ctx, tensor_t *din, tensor_t *dweight,
                                      tensor_t *dbias, const tensor_t *dout, const tensor_t *in,
                                      const tensor_t *weight);

/* Activations a linear layer can fuse (tensor_linear_act_*). */
typedef enum { TENSOR_ACT_NONE = 0, TENSOR_ACT_GELU = 1 } tensor_act_t;

/* A linear layer and its activation as one op: pre = in weight^T + bias
 * (bias may be NULL), out = act(pre), GELU as tensor_gelu_forward. pre
 * (out's shape, not aliasing it) keeps the pre-activation the backward
 * needs; with TENSOR_ACT_NONE it is unused and may be NULL. The CPU runs
 * tensor_linear_forward then tensor_gelu_forward, so its results are those
 * calls' bit for bit, and defines the op; CUDA runs one cuBLASLt GEMM with
 * the bias and GELU in its epilogue (CUBLASLT_EPILOGUE_GELU_AUX_BIAS, pre
 * written as its aux output), or the separate kernels where cuBLASLt has no
 * kernel (N or K not a multiple of 8, pointers not 16-byte aligned). in and
 * weight may be bf16 on CUDA, as for tensor_linear_forward. */
STRATA_API int tensor_linear_act_forward(tensor_ctx_t *ctx, tensor_t *out, tensor_t *pre, const tensor_t *in,
                                         const tensor_t *weight, const tensor_t *bias, tensor_act_t act);
/* Backward of a linear layer whose input is an activation's output,
 * in = act(in_pre): din_pre += act'(in_pre) * (dout weight), dweight +=
 * dout^T in, dbias += the column sums of dout (any of the three may be
 * NULL). dact (in's shape) is workspace, overwritten: the CPU runs
 * tensor_linear_backward into it (zeroed) and tensor_gelu_backward from it;
 * CUDA runs the input-gradient GEMM with the GELU derivative in its epilogue
 * (CUBLASLT_EPILOGUE_DGELU) into dact and adds dact to din_pre. With
 * TENSOR_ACT_NONE it is tensor_linear_backward (din_pre the input's
 * gradient; dact and in_pre unused, may be NULL). f32 operands, or 16-bit
 * activations on CUDA (the separate kernels then). */
STRATA_API int tensor_linear_act_backward(tensor_ctx_t *ctx, tensor_t *din_pre, tensor_t *dact, tensor_t *dweight,
                                          tensor_t *dbias, const tensor_t *dout, const tensor_t *in,
                                          const tensor_t *weight, const tensor_t *in_pre, tensor_act_t act);

/* out(..,N) = in(..,N) + bias(N). */
STRATA_API int tensor_bias_add_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *in,
                                       const tensor_t *bias);
STRATA_API int tensor_bias_add_backward(tensor_ctx_t *ctx, tensor_t *din, tensor_t *dbias,
                                        const tensor_t *dout);

/* Residual add: out = a + b (same shapes; out may alias a or b). */
STRATA_API int tensor_add_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *a,
                                  const tensor_t *b);
STRATA_API int tensor_add_backward(tensor_ctx_t *ctx, tensor_t *da, tensor_t *db,
                                   const tensor_t *dout);

/* LayerNorm over the last dim C (Ba et al. 2016, eq. 3-4):
 * out = (in - mean) * rstd * weight + bias; mean, rstd (rows) saved for backward. */
STRATA_API int tensor_layernorm_forward(tensor_ctx_t *ctx, tensor_t *out, tensor_t *mean,
                                        tensor_t *rstd, const tensor_t *in, const tensor_t *weight,
                                        const tensor_t *bias, float eps);
STRATA_API int tensor_layernorm_backward(tensor_ctx_t *ctx, tensor_t *din, tensor_t *dweight,
                                         tensor_t *dbias, const tensor_t *dout, const tensor_t *in,
                                         const tensor_t *weight, const tensor_t *mean,
                                         const tensor_t *rstd);

/* Residual add fused with the layernorm that reads it (the pre-LN
 * transformer's "x + f(x), then LN"): resid = a + b, out = LayerNorm(resid)
 * as tensor_layernorm_forward, mean and rstd (rows) saved. resid may alias a
 * or b. The CPU runs tensor_add_forward then tensor_layernorm_forward (the
 * results are theirs bit for bit); CUDA one kernel that keeps the sum in
 * flight (one pass less over the (rows, C) stream). */
STRATA_API int tensor_residual_layernorm_forward(tensor_ctx_t *ctx, tensor_t *resid, tensor_t *out,
                                                 tensor_t *mean, tensor_t *rstd, const tensor_t *a,
                                                 const tensor_t *b, const tensor_t *weight,
                                                 const tensor_t *bias, float eps);
/* Its backward: the add is the identity on both inputs, so the gradient of
 * a and of b is one tensor, dresid (the residual stream's gradient), into
 * which the layernorm's input gradient ACCUMULATES (as
 * tensor_layernorm_backward over resid); dweight, dbias accumulate too
 * (each may be NULL). */
STRATA_API int tensor_residual_layernorm_backward(tensor_ctx_t *ctx, tensor_t *dresid, tensor_t *dweight,
                                                  tensor_t *dbias, const tensor_t *dout, const tensor_t *resid,
                                                  const tensor_t *weight, const tensor_t *mean,
                                                  const tensor_t *rstd);

/* LayerNorm of rows cut by columns over a group of ranks (the layernorm of
 * Optimus' 2D, Tesseract's 2.5D and the 3D layer, whose rows lie in column
 * blocks on several ranks): in (R, A) holds A of each row's C columns,
 * weight and bias (A) those columns' parameters, mean and rstd (R) one
 * value a row. The statistics are sums over whole rows, so the op runs in
 * phases; between two phases the caller sums the rows' partial values over
 * the ranks that share the rows (an allreduce of R floats):
 *   phase 0: mean = each row's sum over this rank's columns;
 *   phase 1: (mean holds the whole rows' sums) mean /= C, then rstd = each
 *            row's sum of (in - mean)^2 over this rank's columns (the
 *            variance about the mean, two passes as a whole row's
 *            layernorm computes it);
 *   phase 2: (rstd holds the whole rows' sums) rstd = 1 / sqrt(rstd / C +
 *            eps), out = (in - mean) rstd weight + bias (Ba et al. 2016,
 *            eq. 3-4).
 * out, weight and bias may be NULL in phases 0 and 1. The CPU sums each
 * row in double, in column order; CUDA in double too, in another order. */
STRATA_API int tensor_layernorm_split_forward(tensor_ctx_t *ctx, tensor_t *out, tensor_t *mean, tensor_t *rstd,
                                              const tensor_t *in, const tensor_t *weight, const tensor_t *bias,
                                              int64_t C, float eps, int phase);
/* Its backward, dx = rstd (dn - mean(dn) - n mean(dn n)) with n = (in -
 * mean) rstd, dn = dout weight and the means over whole rows:
 *   phase 0: stats (2R: row r's pair at 2r, 2r + 1) = each row's sums of dn
 *            and of dn n over this rank's columns; dweight += the column
 *            sums of dout n, dbias += those of dout (this rank's rows; either
 *            may be NULL);
 *   phase 1: (stats summed over the ranks that share the rows) din +=
 *            rstd (dn - stats[2r] / C - n stats[2r + 1] / C).
 * din may be NULL in phase 0, dweight and dbias are unused in phase 1. */
STRATA_API int tensor_layernorm_split_backward(tensor_ctx_t *ctx, tensor_t *din, tensor_t *dweight, tensor_t *dbias,
                                               tensor_t *stats, const tensor_t *dout, const tensor_t *in,
                                               const tensor_t *weight, const tensor_t *mean, const tensor_t *rstd,
                                               int64_t C, int phase);

/* out (c, r) = in (r, c) transposed, or (accumulate) out += it. Exact: one
 * copy or one add per element, on the CPU and on CUDA alike. */
STRATA_API int tensor_transpose(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *in, int accumulate);

/* GELU, tanh form (Hendrycks & Gimpel 2016, section 2):
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). out may alias in. */
STRATA_API int tensor_gelu_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *in);
STRATA_API int tensor_gelu_backward(tensor_ctx_t *ctx, tensor_t *din, const tensor_t *dout,
                                    const tensor_t *in);

/* Causal self-attention (Vaswani et al. 2017, eq. 1) with the mask j <= i:
 * qkv (B,T,3C) holds Q, K, V side by side, each (B,T,NH,C/NH); out (B,T,C);
 * lse (B,NH,T) receives the log-sum-exp of every softmax row, which is all the
 * backward needs to rebuild the probabilities (flash-attention style, Dao et
 * al. 2022, algorithm 2): memory O(T), not O(T^2). */
STRATA_API int tensor_attention_forward(tensor_ctx_t *ctx, tensor_t *out, tensor_t *lse,
                                        const tensor_t *qkv, int heads);
STRATA_API int tensor_attention_backward(tensor_ctx_t *ctx, tensor_t *dqkv, const tensor_t *dout,
                                         const tensor_t *qkv, const tensor_t *out,
                                         const tensor_t *lse, int heads);

/* Causal attention by blocks of keys, for sequence parallelism (ring
 * self-attention, Li et al. 2021): queries q (B,Tq,C) at global positions
 * q0, q0 + 1, ..., keys k and values v (B,Tk,C) at k0, ...; key j is seen
 * by query i when k0 + j <= q0 + i. The softmax runs across blocks without
 * the full score matrix (FlashAttention's online softmax, Dao et al. 2022):
 * block_forward adds a block into acc (B,Tq,C, the unnormalised output), m
 * and l (B,NH,Tq: each row's running maximum and sum of exp(s - m); start
 * at 0, -inf and 0); block_finish gives out = acc / l (out may be acc) and
 * lse = m + log l. The backward: block_rowdot gives d = rowsum(dout * out)
 * per head (B,NH,Tq), and block_backward adds one block's part to dq, dk
 * and dv from dout, the final lse and d. Any order of blocks gives the
 * attention of all of them. Every tensor on one device: the CPU, or a
 * CUDA device (one warp per row in f32, the CPU's arithmetic in another
 * order of sums). */
STRATA_API int tensor_attention_block_forward(tensor_ctx_t *ctx, tensor_t *acc, tensor_t *m, tensor_t *l,
                                              const tensor_t *q, const tensor_t *k, const tensor_t *v, int heads,
                                              int64_t q0, int64_t k0);
STRATA_API int tensor_attention_block_finish(tensor_ctx_t *ctx, tensor_t *out, tensor_t *lse, const tensor_t *acc,
                                             const tensor_t *m, const tensor_t *l, int heads);
STRATA_API int tensor_attention_block_rowdot(tensor_ctx_t *ctx, tensor_t *d, const tensor_t *dout,
                                             const tensor_t *out, int heads);
STRATA_API int tensor_attention_block_backward(tensor_ctx_t *ctx, tensor_t *dq, tensor_t *dk, tensor_t *dv,
                                               const tensor_t *dout, const tensor_t *q, const tensor_t *k,
                                               const tensor_t *v, const tensor_t *lse, const tensor_t *d, int heads,
                                               int64_t q0, int64_t k0);

/* Attention of one new position against a KV cache (generation): q (B,C)
 * holds the new queries, k and v (B,Tmax,C) the keys and values of
 * positions 0..len-1 (the new one included), heads side by side as in qkv;
 * out (B,C) = softmax(q k^T / sqrt(C/heads)) v per head, over those len. */
STRATA_API int tensor_attention_decode(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *q,
                                       const tensor_t *k, const tensor_t *v, int len, int heads);

/* Embedding: out(B,T,C) = wte[ids[b,t]] + wpe[t] (wpe (>=T,C) may be NULL);
 * ids i32 (B,T). An id outside [0,V) fails with STRATA_EINVAL. */
STRATA_API int tensor_embedding_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *ids,
                                        const tensor_t *wte, const tensor_t *wpe);
STRATA_API int tensor_embedding_backward(tensor_ctx_t *ctx, tensor_t *dwte, tensor_t *dwpe,
                                         const tensor_t *dout, const tensor_t *ids);
/* Vocabulary-parallel embedding (Megatron): wte (V,C) holds rows
 * [vocab_lo, vocab_lo + V) of a table split over ranks. out = wte[id -
 * vocab_lo] (+ wpe[t]) for ids in the slice, wpe[t] (or 0) for the others'
 * ids (any id >= 0); summed over the slices, with wpe given on one, it is
 * the whole table's embedding. The backward adds into the slice's rows. */
STRATA_API int tensor_embedding_slice_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *ids,
                                              const tensor_t *wte, const tensor_t *wpe, int64_t vocab_lo);
STRATA_API int tensor_embedding_slice_backward(tensor_ctx_t *ctx, tensor_t *dwte, tensor_t *dwpe,
                                               const tensor_t *dout, const tensor_t *ids, int64_t vocab_lo);

/* Fused softmax cross-entropy over the last dim V: losses(..) = lse - logit[target],
 * lse(..) saved. targets i32 (..); a target < 0 is ignored (loss 0, no gradient). */
STRATA_API int tensor_xent_forward(tensor_ctx_t *ctx, tensor_t *losses, tensor_t *lse,
                                   const tensor_t *logits, const tensor_t *targets);
/* dlogits += dloss * (softmax(logits) - onehot(target)), with dloss the
 * gradient of the loss on every row (1/rows for a mean). */
STRATA_API int tensor_xent_backward(tensor_ctx_t *ctx, tensor_t *dlogits, const tensor_t *logits,
                                    const tensor_t *lse, const tensor_t *targets, float dloss);
/* Vocabulary-parallel cross-entropy (Megatron): logits (..,V) are the slice
 * [vocab_lo, vocab_lo + V) of each row, targets global ids. Forward: lse
 * the slice's log-sum-exp, zt the target's logit when the slice holds it
 * (else 0). Over the slices, log sum exp(lse_s) is the row's log-sum-exp and
 * sum zt_s its target logit: the loss is their difference. Backward, with
 * lse the whole row's: dlogits += dloss (softmax - onehot) on the slice;
 * rows with a target < 0 are left. */
STRATA_API int tensor_xent_slice_forward(tensor_ctx_t *ctx, tensor_t *lse, tensor_t *zt, const tensor_t *logits,
                                         const tensor_t *targets, int64_t vocab_lo);
STRATA_API int tensor_xent_slice_backward(tensor_ctx_t *ctx, tensor_t *dlogits, const tensor_t *logits,
                                          const tensor_t *lse, const tensor_t *targets, float dloss,
                                          int64_t vocab_lo);
/* Combines the slices of a group of t ranks: parts (t, R) holds each
 * slice's lse (rank s in row s, as an all-gather leaves them), zt (R) the
 * target logits summed over the group. lse (R) = log sum_s exp(parts[s]),
 * the rows' log-sum-exp, and losses (R) = lse - zt, 0 on rows with a
 * target < 0. losses may be zt (in place). All on one device. */
STRATA_API int tensor_xent_slice_combine(tensor_ctx_t *ctx, tensor_t *lse, tensor_t *losses, const tensor_t *parts,
                                         const tensor_t *zt, const tensor_t *targets);

/* Fused classifier and softmax cross-entropy, a language model's head
 * (logits = h weight^T, weight (V, C) the tied embedding), over chunks of
 * rows so that only one chunk's logits exist at a time, as llm.c's fused
 * classifier keeps its logits in place: for each chunk of chunk_rows rows
 * of h (.., C), the chunk's logits (chunk, V) are computed into a
 * chunk-sized buffer, their log-sum-exp into lse and loss (lse - target
 * logit) into losses; when dh or dweight is given, dlogits = dloss
 * (softmax - onehot(target)) replaces the chunk's logits and the two
 * backward products follow: dh (like h) += dlogits weight and dweight
 * (like weight) += dlogits^T h_chunk (both ACCUMULATE; either may be NULL,
 * both NULL: forward only). targets i32, one per row of h (< 0: ignored:
 * loss 0, no gradient); losses (may be NULL) and lse f32, one per row.
 * chunk_rows <= 0 chooses rows whose f32 logits fit in
 * TENSOR_CLASSIFIER_CHUNK_BYTES. The chunk's buffers are allocated per call
 * (counted by the accountant: the peak shows one chunk, not rows x V).
 * The CPU composes the separate ops chunk by chunk (tensor_linear_forward,
 * tensor_xent_forward, tensor_xent_backward into a zeroed buffer,
 * tensor_linear_backward), which define the results: with one chunk they
 * are those ops' over the whole h bit for bit; with several only dweight's
 * sum over the rows is reassociated (by chunk). CUDA: cuBLAS GEMMs, one
 * kernel per chunk for lse, loss and dlogits; on bf16_matmul contexts h and
 * weight are rounded to bf16 once per call and dlogits is written in bf16
 * (the GEMM's input precision), so each chunk costs no casts. f32 operands;
 * on CUDA h (and dh) may be bf16 or f16 activations, used as they are (W
 * rounded to their dtype once, dlogits written in it, the logits and lse
 * f32). */
#define TENSOR_CLASSIFIER_CHUNK_BYTES ((int64_t)256 << 20)
STRATA_API int tensor_classifier_xent(tensor_ctx_t *ctx, tensor_t *losses, tensor_t *lse, tensor_t *dh,
                                      tensor_t *dweight, const tensor_t *h, const tensor_t *weight,
                                      const tensor_t *targets, float dloss, int64_t chunk_rows);

/* Inverted dropout (Srivastava et al. 2014) with the mask drawn from Philox
 * keyed by (seed, name) at element index offset + i: out = in * keep / (1-p).
 * The backward rebuilds the same mask; nothing is stored. out may alias in. */
STRATA_API int tensor_dropout_forward(tensor_ctx_t *ctx, tensor_t *out, const tensor_t *in, float p,
                                      uint64_t seed, const char *name, int64_t offset);
STRATA_API int tensor_dropout_backward(tensor_ctx_t *ctx, tensor_t *din, const tensor_t *dout,
                                       float p, uint64_t seed, const char *name, int64_t offset);

#ifdef __cplusplus
}
#endif

#endif
