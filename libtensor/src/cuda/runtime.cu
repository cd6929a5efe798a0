/* CUDA runtime pieces of libtensor: state, memory, copies, casts, GEMMs
 * (cuBLAS, bf16 inputs with f32 accumulation) and the element-wise kernels. */
#include <stdio.h>
#include <stdlib.h>

#include "common.cuh"

extern "C" int tcu_device_count(void) {
  int n = 0; /* with no GPU, cudaGetDeviceCount fails and leaves n alone */
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

extern "C" int tcu_device_name(int device, char *name, size_t len) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  snprintf(name, len, "%s", p.name);
  return 0;
}

int tcu_state_get(tensor_ctx_t *ctx, tcu_state **out) {
  void **slot = tensor_ctx_cuda_state(ctx);
  if (*slot) {
    *out = (tcu_state *)*slot;
    CU(cudaSetDevice((*out)->device));
    return STRATA_OK;
  }
  if (tcu_device_count() == 0)
    return tensor_seterr(ctx, STRATA_EUNSUPPORTED, "no CUDA device is present");
  tcu_state *s = (tcu_state *)calloc(1, sizeof *s);
  if (!s) return tensor_seterr(ctx, STRATA_ENOMEM, "CUDA state");
  s->device = tensor_ctx_device(ctx);
  cudaError_t e = cudaSetDevice(s->device);
  if (e == cudaSuccess) e = cudaMalloc(&s->flag, sizeof(int));
  if (e == cudaSuccess) e = cudaMemset(s->flag, 0, sizeof(int)); /* FLAG_CHECK's invariant */
  if (e != cudaSuccess) {
    cudaFree(s->flag); /* NULL when its allocation failed */
    free(s);
    return tensor_seterr(ctx, STRATA_ECUDA, "cuda:%d: %s", tensor_ctx_device(ctx), cudaGetErrorString(e));
  }
  if (cublasCreate(&s->blas) != CUBLAS_STATUS_SUCCESS) {
    cudaFree(s->flag);
    free(s);
    return tensor_seterr(ctx, STRATA_ECUDA, "cublasCreate failed on cuda:%d", tensor_ctx_device(ctx));
  }
  *slot = s;
  *out = s;
  return STRATA_OK;
}

int tcu_scratch(tensor_ctx_t *ctx, size_t bytes, void **p) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  if (s->scratch_bytes < bytes) {
    CU(cudaDeviceSynchronize());
    cudaFree(s->scratch);
    s->scratch = NULL;
    s->scratch_bytes = 0;
    CU(cudaMalloc(&s->scratch, bytes));
    s->scratch_bytes = bytes;
  }
  *p = s->scratch;
  return STRATA_OK;
}

extern "C" void tcu_ctx_destroy(tensor_ctx_t *ctx) {
  void **slot = tensor_ctx_cuda_state(ctx);
  tcu_state *s = (tcu_state *)*slot;
  if (!s) return;
  cudaSetDevice(s->device);
  cudaDeviceSynchronize();
  tcu_sdpa_destroy(s);
  if (s->copy) cudaStreamDestroy(s->copy), cudaEventDestroy(s->copy_ev);
  cublasDestroy(s->blas);
  cudaFree(s->scratch);
  cudaFree(s->flag);
  free(s);
  *slot = NULL;
}

extern "C" int tcu_sync(tensor_ctx_t *ctx) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  CU(cudaDeviceSynchronize());
  return STRATA_OK;
}

extern "C" int tcu_memcpy(tensor_ctx_t *ctx, void *dst, int ddev, const void *src, int sdev, size_t bytes) {
  if (ddev >= 0 && sdev >= 0 && ddev != sdev) {
    CU(cudaMemcpyPeer(dst, ddev, src, sdev, bytes));
  } else {
    CU(cudaSetDevice(ddev >= 0 ? ddev : sdev));
    CU(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  }
  return STRATA_OK;
}

/* The copy stream is non-blocking, so the legacy stream's later work does
 * not wait for it (that is the overlap); an event orders it after the work
 * queued there before the call (the copy reads what that work wrote). */
extern "C" int tcu_memcpy_async(tensor_ctx_t *ctx, void *dst, int ddev, const void *src, int sdev, size_t bytes) {
  tcu_state *s = NULL;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  if (ddev >= 0 && sdev >= 0 && ddev != sdev) return tcu_memcpy(ctx, dst, ddev, src, sdev, bytes);
  if (!s->copy) {
    CU(cudaStreamCreateWithFlags(&s->copy, cudaStreamNonBlocking));
    cudaError_t e = cudaEventCreateWithFlags(&s->copy_ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      cudaStreamDestroy(s->copy);
      s->copy = NULL;
      CU(e);
    }
  }
  CU(cudaEventRecord(s->copy_ev, cudaStreamLegacy));
  CU(cudaStreamWaitEvent(s->copy, s->copy_ev, 0));
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->copy));
  return STRATA_OK;
}

extern "C" int tcu_copy_wait(tensor_ctx_t *ctx) {
  tcu_state *s = NULL;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  if (s->copy) CU(cudaStreamSynchronize(s->copy));
  return STRATA_OK;
}

extern "C" int tcu_memset0(tensor_ctx_t *ctx, void *p, size_t bytes, int device) {
  CU(cudaSetDevice(device));
  CU(cudaMemset(p, 0, bytes));
  return STRATA_OK;
}

__device__ __forceinline__ float load_any(const void *p, int dt, int64_t i) {
  if (dt == TENSOR_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
  if (dt == TENSOR_F16) return __half2float(((const __half *)p)[i]);
  return ((const float *)p)[i];
}
__device__ __forceinline__ void store_any(void *p, int dt, int64_t i, float v) {
  if (dt == TENSOR_BF16)
    ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
  else if (dt == TENSOR_F16)
    ((__half *)p)[i] = __float2half_rn(v);
  else
    ((float *)p)[i] = v;
}

__global__ void k_cast(void *dst, int ddt, const void *src, int sdt, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(dst, ddt, i, load_any(src, sdt, i));
}
__global__ void k_fill(void *dst, int dt, int64_t n, float v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(dst, dt, i, v);
}

extern "C" int tcu_fill(tensor_ctx_t *ctx, void *p, int dtype, int64_t n, float value) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  k_fill<<<blocks_for(n, 256), 256>>>(p, dtype, n, value);
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_cast(tensor_ctx_t *ctx, void *dst, int ddt, const void *src, int sdt, int64_t n) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  k_cast<<<blocks_for(n, 256), 256>>>(dst, ddt, src, sdt, n);
  LAUNCHED();
  return STRATA_OK;
}

static cudaDataType_t cuda_type(int dt) {
  return dt == TENSOR_BF16 ? CUDA_R_16BF : dt == TENSOR_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
 * operands and keep the transpose flags. f32 operands are rounded in
 * scratch to the other operand's 16-bit dtype (16-bit activations times
 * f32 weights), or to bf16 when the context asks for bf16 matmuls. */
extern "C" int tcu_gemm(tensor_ctx_t *ctx, int ta, int tb, int M, int N, int K, float alpha,
                        const void *A, int adt, int lda, int64_t sa, const void *B, int bdt, int ldb,
                        int64_t sb, float beta, void *C, int cdt, int ldc, int64_t sc, int batch) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  int lp = adt != TENSOR_F32 ? adt : bdt != TENSOR_F32 ? bdt : tensor_ctx_bf16_matmul(ctx) ? TENSOR_BF16 : TENSOR_F32;
  if (lp != TENSOR_F32 && (adt == TENSOR_F32 || bdt == TENSOR_F32)) {
    int64_t na = adt == TENSOR_F32 ? (sa ? sa * (batch - 1) : 0) + (int64_t)(ta ? K : M) * lda : 0;
    int64_t nb = bdt == TENSOR_F32 ? (sb ? sb * (batch - 1) : 0) + (int64_t)(tb ? N : K) * ldb : 0;
    int64_t na_pad = (na + 127) / 128 * 128; /* B's copy starts 256-byte aligned, as cudaMalloc's */
    void *scr;
    rc = tcu_scratch(ctx, (size_t)(na_pad + nb) * 2, &scr);
    if (rc) return rc;
    char *a16 = (char *)scr, *b16 = a16 + na_pad * 2;
    if (na) {
      k_cast<<<blocks_for(na, 256), 256>>>(a16, lp, A, TENSOR_F32, na);
      A = a16, adt = lp;
    }
    if (nb) {
      k_cast<<<blocks_for(nb, 256), 256>>>(b16, lp, B, TENSOR_F32, nb);
      B = b16, bdt = lp;
    }
    LAUNCHED();
  }
  cudaDataType_t at = cuda_type(adt), bt = cuda_type(bdt), ctp = cuda_type(cdt);
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F; /* f32 accumulation whatever the inputs */
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch <= 1) {
    CUBLAS(cublasGemmEx(s->blas, opb, opa, N, M, K, &alpha, B, bt, ldb, A, at, lda, &beta, C,
                        ctp, ldc, ct, CUBLAS_GEMM_DEFAULT));
  } else {
    CUBLAS(cublasGemmStridedBatchedEx(s->blas, opb, opa, N, M, K, &alpha, B, bt, ldb, sb, A, at, lda,
                                      sa, &beta, C, ctp, ldc, sc, batch, ct,
                                      CUBLAS_GEMM_DEFAULT));
  }
  return STRATA_OK;
}

/* ---- element-wise (A: the activations' storage type, f32 arithmetic) ---- */

template <typename A>
__global__ void k_bias_fwd(A *out, const A *in, const float *bias, int64_t n, int N) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    stf(out + i, ldf(in + i) + bias[i % N]);
}
/* Column sums: blockIdx.y takes a chunk of rows, threads consecutive columns
 * (coalesced), one atomic per column and chunk. */
template <typename A>
__global__ void k_colsum(float *dst, const A *src, int64_t rows, int N, int64_t chunk) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= N) return;
  int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  float acc = 0.f;
  for (int64_t r = r0; r < r1; r++) acc += ldf(src + r * N + c);
  atomicAdd(dst + c, acc);
}
template <typename A>
__global__ void k_add(A *out, const A *a, const A *b, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    stf(out + i, ldf(a + i) + ldf(b + i));
}
template <typename A>
__global__ void k_acc(A *dst, const A *src, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    stf(dst + i, ldf(dst + i) + ldf(src + i));
}

#define GELU_S 0.7978845608028654f
#define GELU_C 0.044715f
template <typename A>
__global__ void k_gelu_fwd(A *out, const A *in, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float x = ldf(in + i);
    stf(out + i, 0.5f * x * (1.f + tanhf(GELU_S * (x + GELU_C * x * x * x))));
  }
}
template <typename A>
__global__ void k_gelu_bwd(A *din, const A *dout, const A *in, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float x = ldf(in + i), t = tanhf(GELU_S * (x + GELU_C * x * x * x));
    float g = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * GELU_S * (1.f + 3.f * GELU_C * x * x);
    stf(din + i, ldf(din + i) + g * ldf(dout + i));
  }
}

__global__ void k_dropout(float *out, const float *in, int64_t n, float p, uint32_t k0, uint32_t k1,
                          int64_t offset, int accumulate) {
  float scale = 1.f / (1.f - p);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint4 r = philox_dev(k0, k1, (uint64_t)(offset + i), 0);
    float u = (float)(r.x >> 8) * (1.0f / 16777216.0f);
    float v = u >= p ? in[i] * scale : 0.f;
    out[i] = accumulate ? out[i] + v : v;
  }
}

#define STATE()                                                                                    \
  tcu_state *s;                                                                                    \
  int rc = tcu_state_get(ctx, &s);                                                                 \
  if (rc) return rc

extern "C" int tcu_bias_forward(tensor_ctx_t *ctx, void *out, const void *in, int adt, const float *bias,
                                int64_t rows, int N) {
  STATE();
  ACT_DISPATCH(adt, k_bias_fwd<A><<<blocks_for(rows * N, 256), 256>>>((A *)out, (const A *)in, bias, rows * N, N));
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_bias_backward(tensor_ctx_t *ctx, float *dbias, const void *dout, int adt, int64_t rows, int N) {
  STATE();
  int64_t chunk = 64;
  int64_t gy = (rows + chunk - 1) / chunk;
  if (gy > 65535) chunk = (rows + 65534) / 65535, gy = (rows + chunk - 1) / chunk;
  dim3 grid((N + 127) / 128, (unsigned)gy);
  ACT_DISPATCH(adt, k_colsum<A><<<grid, 128>>>(dbias, (const A *)dout, rows, N, chunk));
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_add(tensor_ctx_t *ctx, void *out, const void *a, const void *b, int adt, int64_t n) {
  STATE();
  ACT_DISPATCH(adt, k_add<A><<<blocks_for(n, 256), 256>>>((A *)out, (const A *)a, (const A *)b, n));
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_acc(tensor_ctx_t *ctx, void *dst, const void *src, int adt, int64_t n) {
  STATE();
  ACT_DISPATCH(adt, k_acc<A><<<blocks_for(n, 256), 256>>>((A *)dst, (const A *)src, n));
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_gelu_forward(tensor_ctx_t *ctx, void *out, const void *in, int adt, int64_t n) {
  STATE();
  ACT_DISPATCH(adt, k_gelu_fwd<A><<<blocks_for(n, 256), 256>>>((A *)out, (const A *)in, n));
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_gelu_backward(tensor_ctx_t *ctx, void *din, const void *dout, const void *in, int adt,
                                 int64_t n) {
  STATE();
  ACT_DISPATCH(adt, k_gelu_bwd<A><<<blocks_for(n, 256), 256>>>((A *)din, (const A *)dout, (const A *)in, n));
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_dropout(tensor_ctx_t *ctx, float *out, const float *in, int64_t n, float p,
                           const uint32_t key[2], int64_t offset, int accumulate) {
  STATE();
  k_dropout<<<blocks_for(n, 256), 256>>>(out, in, n, p, key[0], key[1], offset, accumulate);
  LAUNCHED();
  return STRATA_OK;
}
