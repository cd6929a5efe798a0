/* Shared pieces of libtensor's CUDA files: error translation, the per-context
 * state (cuBLAS handle, scratch), launch helpers and the device Philox. */
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "tensor_cuda.h"

/* CUDA files return early instead of `goto fail` (C++ forbids jumping over
 * initialisations); nothing they hold needs releasing on the error path. */
#define CU(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return tensor_seterr(ctx, STRATA_ECUDA, "%s: %s", #call, cudaGetErrorString(e_));            \
  } while (0)
#define CUBLAS(call)                                                                               \
  do {                                                                                             \
    cublasStatus_t s_ = (call);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                               \
      return tensor_seterr(ctx, STRATA_ECUDA, "%s: cuBLAS status %d", #call, (int)s_);             \
  } while (0)
#define LAUNCHED() CU(cudaGetLastError())
/* The device error flag (tcu_state.flag) is 0 between calls: zeroed when the
 * state is made and again whenever a kernel raised it. FLAG_CHECK reads it back
 * after a launch (so it waits for the kernel) and, if raised, fails with
 * STRATA_EINVAL and the message given. */
#define FLAG_CHECK(...)                                                                            \
  do {                                                                                             \
    int f_ = 0;                                                                                    \
    CU(cudaMemcpy(&f_, s->flag, sizeof f_, cudaMemcpyDeviceToHost));                               \
    if (f_) {                                                                                      \
      CU(cudaMemset(s->flag, 0, sizeof f_));                                                       \
      return tensor_seterr(ctx, STRATA_EINVAL, __VA_ARGS__);                                       \
    }                                                                                              \
  } while (0)

struct tcu_sdpa; /* cuDNN's handle and attention plans (cudnn_attention.cu) */

struct tcu_state {
  int device;
  cublasHandle_t blas;
  void *scratch; /* bf16 copies of f32 GEMM and attention operands, attention row terms, cuDNN workspace */
  size_t scratch_bytes;
  int *flag; /* device-side error flag (e.g. an embedding id out of range) */
  tcu_sdpa *sdpa; /* NULL until attention first goes to cuDNN */
  cudaStream_t copy;   /* tensor_copy_async's stream (non-blocking; NULL until first used) */
  cudaEvent_t copy_ev; /* recorded on the legacy stream before each async copy */
};

/* The context's CUDA state, created on first use on the context's device. */
int tcu_state_get(tensor_ctx_t *ctx, tcu_state **out);
/* Scratch of at least `bytes` (grown, never shrunk; not counted by the accountant
 * because it is workspace, like cuBLAS's own). */
int tcu_scratch(tensor_ctx_t *ctx, size_t bytes, void **p);

/* cuDNN's fused attention (cudnn_attention.cu): same arguments as
 * tcu_attention_forward/backward; TCU_SDPA_DECLINED when the context does not
 * use cuDNN or cuDNN has no plan for the shape (strata's kernel then runs). */
#define TCU_SDPA_DECLINED 1
int tcu_sdpa_forward(tensor_ctx_t *ctx, void *out, float *lse, const void *qkv, int adt, int B, int T, int C,
                     int NH);
int tcu_sdpa_backward(tensor_ctx_t *ctx, void *dqkv, const void *dout, const void *qkv, const void *out,
                      int adt, const float *lse, int B, int T, int C, int NH);
/* Frees the cuDNN handle and plans of a state (tcu_ctx_destroy). */
void tcu_sdpa_destroy(tcu_state *s);

static inline unsigned blocks_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return (unsigned)(b > 65535LL * 8 ? 65535LL * 8 : b);
}

/* Philox4x32-10, identical to libtensor/src/rng.c. */
__device__ __forceinline__ uint4 philox_dev(uint32_t k0, uint32_t k1, uint64_t index, uint32_t stream) {
  uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32), c2 = stream, c3 = 0;
#pragma unroll
  for (int r = 0; r < 10; r++) {
    uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c1 = lo1;
    c3 = lo0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return make_uint4(c0, c1, c2, c3);
}

/* Activations of any float dtype (f32, bf16, f16): loaded into f32, the
 * arithmetic done in f32, stored rounded to nearest even. */
__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float ldf(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ void stf(float *p, float v) { *p = v; }
__device__ __forceinline__ void stf(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void stf(__half *p, float v) { *p = __float2half_rn(v); }

/* Runs the statements with `A` the storage type of activation dtype adt
 * (a TENSOR_* value): the one switch from run-time dtype to a template. */
#define ACT_DISPATCH(adt, ...)                                                                     \
  do {                                                                                             \
    switch (adt) {                                                                                 \
    case TENSOR_BF16: {                                                                            \
      typedef __nv_bfloat16 A;                                                                     \
      __VA_ARGS__;                                                                                 \
    } break;                                                                                       \
    case TENSOR_F16: {                                                                             \
      typedef __half A;                                                                            \
      __VA_ARGS__;                                                                                 \
    } break;                                                                                       \
    default: {                                                                                     \
      typedef float A;                                                                             \
      __VA_ARGS__;                                                                                 \
    } break;                                                                                       \
    }                                                                                              \
  } while (0)

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/* Block-wide sum for blockDim.x a multiple of 32 (<= 1024); every thread gets it. */
__device__ __forceinline__ float block_sum(float v, float *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -INFINITY;
  return warp_max(v);
}
