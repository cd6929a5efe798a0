// liboptim's CUDA kernels: multi-tensor fused updates in the manner of
// NVIDIA Apex's multi_tensor_apply. Each launch carries (as kernel
// parameters, no device allocation) up to MAX_JOBS tensors and MAX_BLOCKS
// chunk descriptors (more tensors or chunks: more launches); one block updates one chunk of CHUNK
// elements of one tensor. The per-element arithmetic is that of the CPU kernels (kernels.c), with
// the same host-computed per-tensor constants, so both backends agree to rounding (nvcc contracts
// a*b+c into FMAs as the CPU's -march=x86-64-v3 build may do in a different place: a few ulp).
//
// Sums of squares: every block writes its chunk's two partial sums (double)
// to a scratch array; the host adds them per tensor in chunk order, so the
// result does not depend on block scheduling.
#include <cuda_runtime.h>
#include <new>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <strata/optim.h>
#include <strata/status.h>

#include "internal.h"

namespace {

// Kernel parameters may take up to 32764 bytes on Volta and later with CUDA
// 12.1+: 36 jobs (3.2 KB) and 2048 block descriptors (16 KB) cover 64 Mi
// parameters in one launch of ~4 waves on an H100 (132 SMs x 4 blocks).
constexpr int MAX_JOBS = 36;
constexpr int MAX_BLOCKS = 2048;
constexpr int THREADS = 512;
constexpr size_t CHUNK = 32768;

struct Meta {
  optim_job jobs[MAX_JOBS];
  int block_job[MAX_BLOCKS];
  int block_chunk[MAX_BLOCKS];
};

__device__ __forceinline__ uint16_t to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t q = (u >> 16) | 0x40u;
  return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? q : r);
}

// Same bit-exact rounding as kernels.c's to_f16 (round to nearest even).
__device__ __forceinline__ uint16_t to_f16(float f) {
  uint32_t x = __float_as_uint(f);
  uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint32_t big = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
  float d = __fadd_rn(__uint_as_float(x), 0.5f);
  uint32_t sub = __float_as_uint(d) - 0x3f000000u;
  uint32_t nrm = (x + 0xc8000fffu + ((x >> 13) & 1u)) >> 13;
  uint32_t o = x >= 0x47800000u ? big : (x < 0x38800000u ? sub : nrm);
  return (uint16_t)(o | (sign >> 16));
}

__device__ __forceinline__ void store_lowp(const optim_job &j, size_t i, float x) {
  if (!j.lowp) return;
  if (j.lowp_dtype == OPTIM_LOWP_BF16)
    ((uint16_t *)j.lowp)[i] = to_bf16(x);
  else if (j.lowp_dtype == OPTIM_LOWP_F16)
    ((uint16_t *)j.lowp)[i] = to_f16(x);
}

// Block-wide sum of two doubles; result valid in thread 0.
__device__ void block_sum2(double &a, double &b) {
  __shared__ double sa[THREADS / 32], sb[THREADS / 32];
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  int w = threadIdx.x / 32, l = threadIdx.x % 32;
  if (l == 0) {
    sa[w] = a;
    sb[w] = b;
  }
  __syncthreads();
  if (w == 0) {
    a = l < THREADS / 32 ? sa[l] : 0.0;
    b = l < THREADS / 32 ? sb[l] : 0.0;
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_down_sync(0xffffffffu, a, o);
      b += __shfl_down_sync(0xffffffffu, b, o);
    }
  }
}

template <int OP>
__global__ void __launch_bounds__(THREADS)
    multi_tensor(const __grid_constant__ Meta meta, double *partials) {
  const optim_job &j = meta.jobs[meta.block_job[blockIdx.x]];
  const size_t a = (size_t)meta.block_chunk[blockIdx.x] * CHUNK;
  const size_t b = a + CHUNK < j.n ? a + CHUNK : j.n;
  double s0 = 0.0, s1 = 0.0;
  for (size_t i = a + threadIdx.x; i < b; i += THREADS) {
    if (OP == OP_SGD) {
      float pi = j.p[i];
      float d = j.gs * j.g[i] + j.wd * pi;
      float dir = d;
      if (j.m) {
        float bi = j.b1 * j.m[i] + d;
        j.m[i] = bi;
        dir = j.nesterov ? d + j.b1 * bi : bi;
      }
      pi = pi - j.lr * dir;
      j.p[i] = pi;
      store_lowp(j, i, pi);
    } else if (OP == OP_ADAMW || OP == OP_LAMB_PARTS) {
      float gi = j.gs * j.g[i], pi = j.p[i];
      float mi = j.b1 * j.m[i] + (1.0f - j.b1) * gi;
      float vi = j.b2 * j.v[i] + (1.0f - j.b2) * gi * gi;
      j.m[i] = mi;
      j.v[i] = vi;
      float u = (mi * j.c1) / (sqrtf(vi) * j.c2 + j.eps) + j.wd * pi;
      if (OP == OP_ADAMW) {
        pi = pi - j.lr * u;
        j.p[i] = pi;
        store_lowp(j, i, pi);
      } else {
        s0 += (double)pi * (double)pi;
        s1 += (double)u * (double)u;
      }
    } else if (OP == OP_LAMB) {
      float pi = j.p[i];
      float r = (j.m[i] * j.c1) / (sqrtf(j.v[i]) * j.c2 + j.eps) + j.wd * pi;
      pi = pi - j.lr * r;
      j.p[i] = pi;
      store_lowp(j, i, pi);
    } else if (OP == OP_LARS_PARTS) {
      float pi = j.p[i], gi = j.gs * j.g[i];
      s0 += (double)pi * (double)pi;
      s1 += (double)gi * (double)gi;
    } else if (OP == OP_LARS) {
      float pi = j.p[i];
      float d = j.lr * (j.gs * j.g[i] + j.wd * pi);
      if (j.m) {
        d = j.b1 * j.m[i] + d;
        j.m[i] = d;
      }
      pi = pi - d;
      j.p[i] = pi;
      store_lowp(j, i, pi);
    } else if (OP == OP_GRAD_SUMSQ) {
      float gi = j.g[i];
      s0 += (double)gi * (double)gi;
    }
  }
  if (OP == OP_LAMB_PARTS || OP == OP_LARS_PARTS || OP == OP_GRAD_SUMSQ) {
    block_sum2(s0, s1);
    if (threadIdx.x == 0) {
      partials[2 * blockIdx.x] = s0;
      partials[2 * blockIdx.x + 1] = s1;
    }
  }
}

void launch(int op, const Meta &meta, int nblocks, double *partials, cudaStream_t st) {
  switch (op) {
  case OP_SGD: multi_tensor<OP_SGD><<<nblocks, THREADS, 0, st>>>(meta, partials); break;
  case OP_ADAMW: multi_tensor<OP_ADAMW><<<nblocks, THREADS, 0, st>>>(meta, partials); break;
  case OP_LAMB_PARTS:
    multi_tensor<OP_LAMB_PARTS><<<nblocks, THREADS, 0, st>>>(meta, partials);
    break;
  case OP_LAMB: multi_tensor<OP_LAMB><<<nblocks, THREADS, 0, st>>>(meta, partials); break;
  case OP_LARS_PARTS:
    multi_tensor<OP_LARS_PARTS><<<nblocks, THREADS, 0, st>>>(meta, partials);
    break;
  case OP_LARS: multi_tensor<OP_LARS><<<nblocks, THREADS, 0, st>>>(meta, partials); break;
  case OP_GRAD_SUMSQ:
    multi_tensor<OP_GRAD_SUMSQ><<<nblocks, THREADS, 0, st>>>(meta, partials);
    break;
  default: break;
  }
}

int cuda_fail(char *err, size_t errlen, const char *what, cudaError_t e) {
  if (err && errlen) snprintf(err, errlen, "optim (CUDA): %s: %s", what, cudaGetErrorString(e));
  return STRATA_ECUDA;
}

} // namespace

extern "C" int optim_cuda_device_count(void) {
  int n = 0; // left untouched by the runtime when no driver or device is present
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

extern "C" int optim_cuda_run(int device, void *stream, int op, const optim_job *jobs, int nj,
                              double *sums, char *err, size_t errlen) {
  int rc = STRATA_OK;
  cudaError_t e;
  cudaStream_t st = (cudaStream_t)stream;
  const bool want = op == OP_LAMB_PARTS || op == OP_LARS_PARTS || op == OP_GRAD_SUMSQ;
  double *dpart = nullptr, *hpart = nullptr;
  int *chunk_job = nullptr;
  size_t total_chunks = 0;
  Meta meta;
  int njm = 0, nb = 0;
  size_t launched = 0;

  int prev = -1; // the caller's current device, restored on return
  if ((e = cudaGetDevice(&prev)) != cudaSuccess) return cuda_fail(err, errlen, "cudaGetDevice", e);
  if (prev != device && (e = cudaSetDevice(device)) != cudaSuccess)
    return cuda_fail(err, errlen, "cudaSetDevice", e);
  for (int i = 0; i < nj; i++)
    total_chunks += (jobs[i].n + CHUNK - 1) / CHUNK;
  if (sums) memset(sums, 0, 2 * (size_t)nj * sizeof *sums);
  if (total_chunks == 0) goto fail;
  if (want) {
    chunk_job = new (std::nothrow) int[total_chunks];
    hpart = new (std::nothrow) double[2 * total_chunks];
    if (!chunk_job || !hpart) {
      if (err && errlen)
        snprintf(err, errlen, "optim (CUDA): out of host memory for %zu chunks", total_chunks);
      rc = STRATA_ENOMEM;
      goto fail;
    }
    if ((e = cudaMallocAsync((void **)&dpart, 2 * total_chunks * sizeof(double), st)) !=
        cudaSuccess) {
      rc = cuda_fail(err, errlen, "cudaMallocAsync", e);
      goto fail;
    }
  }
  memset(&meta, 0, sizeof meta);
  for (int i = 0; i < nj; i++) {
    const size_t nc = (jobs[i].n + CHUNK - 1) / CHUNK;
    if (nc == 0) continue;
    if (njm == MAX_JOBS) { // a full tensor table: launch what is queued
      launch(op, meta, nb, want ? dpart + 2 * launched : nullptr, st);
      launched += nb;
      nb = 0;
      njm = 0;
    }
    meta.jobs[njm] = jobs[i];
    for (size_t c = 0; c < nc; c++) {
      if (nb == MAX_BLOCKS) { // a full block table: launch, keep this tensor
        launch(op, meta, nb, want ? dpart + 2 * launched : nullptr, st);
        launched += nb;
        nb = 0;
        meta.jobs[0] = jobs[i];
        njm = 0;
      }
      meta.block_job[nb] = njm;
      meta.block_chunk[nb] = (int)c;
      if (want) chunk_job[launched + nb] = i;
      nb++;
    }
    njm++;
  }
  if (nb > 0) launch(op, meta, nb, want ? dpart + 2 * launched : nullptr, st);
  if ((e = cudaGetLastError()) != cudaSuccess) {
    rc = cuda_fail(err, errlen, "kernel launch", e);
    goto fail;
  }
  if (want) {
    if ((e = cudaMemcpyAsync(hpart, dpart, 2 * total_chunks * sizeof(double),
                             cudaMemcpyDeviceToHost, st)) != cudaSuccess ||
        (e = cudaStreamSynchronize(st)) != cudaSuccess) {
      rc = cuda_fail(err, errlen, "copying partial sums", e);
      goto fail;
    }
    for (size_t c = 0; c < total_chunks; c++) {
      sums[2 * chunk_job[c]] += hpart[2 * c];
      sums[2 * chunk_job[c] + 1] += hpart[2 * c + 1];
    }
  }
fail:
  if (dpart) cudaFreeAsync(dpart, st);
  if (prev != device) cudaSetDevice(prev);
  delete[] chunk_job;
  delete[] hpart;
  return rc;
}
