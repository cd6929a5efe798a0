/* libtensor internals: the context, error reporting, checks and the CUDA twins. */
#ifndef STRATA_TENSOR_INTERNAL_H
#define STRATA_TENSOR_INTERNAL_H

#include <stdatomic.h>
#include <stdarg.h>
#include <strata/tensor.h>

#include "devpool.h"

#define TENSOR_ERRLEN 512
#define TENSOR_SCRATCH_SLOTS 64

/* One CUDA device's memory as a context sees it: the caching pool (NULL
 * until the first allocation there, or always with direct allocation) and
 * what its backend callbacks need. */
typedef struct {
  tensor_ctx_t *ctx;
  int device;
  tpool_t *pool;
} tensor_devmem_t;

struct tensor_ctx {
  int threads;
  int device;
  int bf16_matmul;
  int cuda_alloc;         /* TENSOR_CUDA_ALLOC_CACHE or _DIRECT; -1: a bad STRATA_CUDA_ALLOC */
  char cuda_alloc_env[32]; /* that bad value, for the message */
  tensor_devmem_t devmem[TENSOR_MAX_DEVICES];
  int attention; /* tensor_attention_t */
  atomic_size_t mem_current[TENSOR_MAX_DEVICES + 1]; /* slot 0: cpu, slot n+1: cuda:n */
  atomic_size_t mem_peak[TENSOR_MAX_DEVICES + 1];
  size_t mem_limit[TENSOR_MAX_DEVICES + 1];          /* 0: none (tensor_memory_set_limit) */
  void *cuda; /* CUDA state (cuBLAS handles, scratch), owned; NULL until first used */
  void *cublaslt; /* cuBLASLt handle (fused epilogues), owned; NULL until first used */
  /* Host scratch per OpenMP thread, kept between calls: a fresh malloc of a
   * few hundred KiB per op is an mmap, page faults and zeroing every time. */
  float *scratch[TENSOR_SCRATCH_SLOTS];
  size_t scratch_bytes[TENSOR_SCRATCH_SLOTS];
  char err[TENSOR_ERRLEN];
};

/* Records a formatted message in ctx and returns code. */
int tensor_seterr(tensor_ctx_t *ctx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void **tensor_ctx_cuda_state(tensor_ctx_t *ctx);
void **tensor_ctx_cublaslt(tensor_ctx_t *ctx);
int tensor_ctx_device(const tensor_ctx_t *ctx);
int tensor_ctx_bf16_matmul(const tensor_ctx_t *ctx);
int tensor_ctx_attention(const tensor_ctx_t *ctx);

/* One exit per function: CHECK sets rc and jumps to `fail`. */
#define CHECK(cond, code, ...)                                                                     \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      rc = tensor_seterr(ctx, (code), __VA_ARGS__);                                                \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)
#define TRY(expr)                                                                                  \
  do {                                                                                             \
    rc = (expr);                                                                                   \
    if (rc != STRATA_OK) goto fail;                                                                \
  } while (0)

/* Checks that t is a tensor of `dtype` with ndim in [lo, hi] on `device`
 * (device < -1: any). `fn` and `what` name the call and the argument. */
int tensor_check(tensor_ctx_t *ctx, const char *fn, const char *what, const tensor_t *t,
                 tensor_dtype_t dtype, int lo, int hi);
/* An activation's dtype: bf16 or f16 where t is one, else f32 (so that a
 * tensor of another dtype fails tensor_check_act as "expected f32"). */
static inline tensor_dtype_t tensor_act_dtype(const tensor_t *t) {
  return t && (t->dtype == TENSOR_BF16 || t->dtype == TENSOR_F16) ? t->dtype : TENSOR_F32;
}
/* tensor_check for an activation or activation gradient of dtype `dtype`:
 * f32 anywhere, bf16 and f16 on a CUDA device only (STRATA_EUNSUPPORTED on
 * the CPU, whose kernels are f32). */
int tensor_check_act(tensor_ctx_t *ctx, const char *fn, const char *what, const tensor_t *t,
                     tensor_dtype_t dtype, int lo, int hi);
/* Checks that t (optional when NULL) lives on `device`. */
int tensor_check_device(tensor_ctx_t *ctx, const char *fn, const char *what, const tensor_t *t,
                        int device);
/* Product of dims [0, n). */
int64_t tensor_prod(const tensor_t *t, int n);
/* Same shape. */
int tensor_same_shape(const tensor_t *a, const tensor_t *b);

static inline int mem_slot(int device) { return device + 1; }
void tensor_mem_add(tensor_ctx_t *ctx, int device, size_t bytes);
void tensor_mem_sub(tensor_ctx_t *ctx, int device, size_t bytes);

/* Device memory through the context's pool for `device` (devmem.c): the
 * caching allocator, or cudaMalloc/cudaFree per call with direct allocation.
 * Not counted by the accountant (tensor_alloc does that). */
int tensor_device_alloc(tensor_ctx_t *ctx, void **p, size_t bytes, int device);
void tensor_device_free(tensor_ctx_t *ctx, void *p, int device);
/* Gives every pool's memory back (at context destruction). */
void tensor_device_pools_destroy(tensor_ctx_t *ctx);
void tensor_device_reset_peak(tensor_ctx_t *ctx, int device);

/* Validates a linear layer's operands (tensor_linear_forward's rules) and
 * returns its rows, outputs N and inputs K. */
int tensor_linear_check(tensor_ctx_t *ctx, const char *fn, const tensor_t *out, const tensor_t *in,
                        const tensor_t *weight, const tensor_t *bias, int64_t *rows, int *N, int *K);

/* Single-threaded OpenBLAS sgemm (row major) split over the context's OpenMP
 * threads along the larger of M and N; called inside a parallel region it
 * runs on the calling thread only. */
void tensor_sgemm(const tensor_ctx_t *ctx, int trans_a, int trans_b, int M, int N, int K,
                  float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc);

/* Scratch of at least `bytes` for thread slot `slot` (< TENSOR_SCRATCH_SLOTS),
 * owned by the context; NULL when out of memory. Callers in one parallel
 * region use distinct slots. */
float *tensor_scratch(tensor_ctx_t *ctx, int slot, size_t bytes);

/* Philox counter for one element: 4 x 32 bits from (key, index, stream). */
void tensor_philox_elem(uint32_t out[4], const uint32_t key[2], uint64_t index, uint32_t stream);

#if defined(STRATA_CUDA)
#include "tensor_cuda.h"
#endif

#endif
