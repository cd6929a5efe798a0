/* Fused causal attention on CUDA in the manner of FlashAttention (Dao et al.
 * 2022): Q, K, V tiles in shared memory, an online softmax (running max and
 * sum per row, algorithm 1 lines 9-12) so the T x T matrix never reaches
 * global memory, and only the row log-sum-exp saved for the backward, which
 * recomputes P tile by tile (algorithm 2 / appendix B.2): dV += P^T dO,
 * dS = P (dO V^T - D), D = rowsum(dO * O), dK += dS^T Q, dQ += dS K. f32
 * throughout on the CUDA cores, written for clarity and exactness against the
 * CPU reference. Contexts with bf16 matmuls hand attention to cuDNN's fused
 * flash attention on tensor cores first (cudnn_attention.cu); this kernel
 * runs where cuDNN is absent or declines. */
#include "common.cuh"

#define BR 16 /* query rows per tile */
#define BC 16 /* key rows per tile */
#define NT 128

__global__ void k_attn_fwd(float *out, float *lse, const float *qkv, int T, int C, int NH, float scale) {
  extern __shared__ float sm[];
  /* K and V rows are padded to hs + 1 floats: the score loop reads K[j][c]
   * with j varying across a warp, which at a stride of hs (a multiple of 32)
   * would hit one shared-memory bank 16 times. */
  int hs = C / NH, ks = hs + 1, C3 = 3 * C, tid = threadIdx.x;
  int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BR;
  float *Qs = sm, *Ks = Qs + BR * hs, *Vs = Ks + BC * ks, *Os = Vs + BC * ks, *Ss = Os + BR * hs;
  float *mrow = Ss + BR * BC, *lrow = mrow + BR, *corr = lrow + BR;
  const float *base = qkv + (size_t)b * T * C3 + h * hs;
  for (int idx = tid; idx < BR * hs; idx += NT) {
    int i = idx / hs, c = idx % hs;
    Qs[idx] = q0 + i < T ? base[(size_t)(q0 + i) * C3 + c] : 0.f;
    Os[idx] = 0.f;
  }
  if (tid < BR) {
    mrow[tid] = -INFINITY;
    lrow[tid] = 0.f;
  }
  __syncthreads();
  int kend = min(T, q0 + BR);
  for (int k0 = 0; k0 < kend; k0 += BC) {
    for (int idx = tid; idx < BC * hs; idx += NT) {
      int j = idx / hs, c = idx % hs;
      bool ok = k0 + j < T;
      Ks[j * ks + c] = ok ? base[(size_t)(k0 + j) * C3 + C + c] : 0.f;
      Vs[j * ks + c] = ok ? base[(size_t)(k0 + j) * C3 + 2 * C + c] : 0.f;
    }
    __syncthreads();
    for (int idx = tid; idx < BR * BC; idx += NT) {
      int i = idx / BC, j = idx % BC;
      float sv = -INFINITY;
      if (k0 + j <= q0 + i && k0 + j < T && q0 + i < T) {
        float d = 0.f;
        for (int c = 0; c < hs; c++) d += Qs[i * hs + c] * Ks[j * ks + c];
        sv = d * scale;
      }
      Ss[idx] = sv;
    }
    __syncthreads();
    if (tid < BR) {
      int i = tid;
      float mx = mrow[i];
      for (int j = 0; j < BC; j++) mx = fmaxf(mx, Ss[i * BC + j]);
      if (mx == -INFINITY) { /* a padding row past T: nothing to attend */
        corr[i] = 1.f;
        for (int j = 0; j < BC; j++) Ss[i * BC + j] = 0.f;
      } else {
        float sum = 0.f;
        for (int j = 0; j < BC; j++) {
          float p = __expf(Ss[i * BC + j] - mx);
          Ss[i * BC + j] = p;
          sum += p;
        }
        float cr = __expf(mrow[i] - mx);
        corr[i] = cr;
        lrow[i] = lrow[i] * cr + sum;
        mrow[i] = mx;
      }
    }
    __syncthreads();
    for (int idx = tid; idx < BR * hs; idx += NT) {
      int i = idx / hs, c = idx % hs;
      float acc = Os[idx] * corr[i];
      for (int j = 0; j < BC; j++) acc += Ss[i * BC + j] * Vs[j * ks + c];
      Os[idx] = acc;
    }
    __syncthreads();
  }
  for (int idx = tid; idx < BR * hs; idx += NT) {
    int i = idx / hs, c = idx % hs;
    if (q0 + i < T) out[((size_t)b * T + q0 + i) * C + h * hs + c] = Os[idx] / lrow[i];
  }
  if (tid < BR && q0 + tid < T) lse[((size_t)b * NH + h) * T + q0 + tid] = mrow[tid] + logf(lrow[tid]);
}

/* D[b,h,i] = sum_c dO[b,i,h,c] O[b,i,h,c]: one warp per (b, h, i). */
__global__ void k_attn_D(float *D, const float *dout, const float *out, int B, int T, int C, int NH) {
  int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31, hs = C / NH;
  if (w >= (int64_t)B * NH * T) return;
  int i = (int)(w % T), h = (int)((w / T) % NH), b = (int)(w / ((int64_t)T * NH));
  const float *o = out + ((size_t)b * T + i) * C + h * hs, *g = dout + ((size_t)b * T + i) * C + h * hs;
  float s = 0.f;
  for (int c = lane; c < hs; c += 32) s += o[c] * g[c];
  s = warp_sum(s);
  if (lane == 0) D[w] = s;
}

__global__ void k_attn_bwd(float *dqkv, const float *dout, const float *qkv, const float *lse,
                           const float *D, int T, int C, int NH, float scale) {
  extern __shared__ float sm[];
  int hs = C / NH, ks = hs + 1, C3 = 3 * C, tid = threadIdx.x; /* ks: padded K, V rows */
  int b = blockIdx.z, h = blockIdx.y, k0 = blockIdx.x * BC;
  float *Ks = sm, *Vs = Ks + BC * ks, *dKs = Vs + BC * ks, *dVs = dKs + BC * hs;
  float *Qs = dVs + BC * hs, *dOs = Qs + BR * hs, *Ps = dOs + BR * hs, *dSs = Ps + BR * BC;
  const float *base = qkv + (size_t)b * T * C3 + h * hs;
  const float *gbase = dout + (size_t)b * T * C + h * hs;
  float *dbase = dqkv + (size_t)b * T * C3 + h * hs;
  const float *L = lse + ((size_t)b * NH + h) * T, *Dr = D + ((size_t)b * NH + h) * T;
  for (int idx = tid; idx < BC * hs; idx += NT) {
    int j = idx / hs, c = idx % hs;
    bool ok = k0 + j < T;
    Ks[j * ks + c] = ok ? base[(size_t)(k0 + j) * C3 + C + c] : 0.f;
    Vs[j * ks + c] = ok ? base[(size_t)(k0 + j) * C3 + 2 * C + c] : 0.f;
    dKs[idx] = 0.f;
    dVs[idx] = 0.f;
  }
  for (int q0 = (k0 / BR) * BR; q0 < T; q0 += BR) {
    __syncthreads();
    for (int idx = tid; idx < BR * hs; idx += NT) {
      int i = idx / hs, c = idx % hs;
      bool ok = q0 + i < T;
      Qs[idx] = ok ? base[(size_t)(q0 + i) * C3 + c] : 0.f;
      dOs[idx] = ok ? gbase[(size_t)(q0 + i) * C + c] : 0.f;
    }
    __syncthreads();
    for (int idx = tid; idx < BR * BC; idx += NT) {
      int i = idx / BC, j = idx % BC;
      float p = 0.f, ds = 0.f;
      if (k0 + j <= q0 + i && q0 + i < T && k0 + j < T) {
        float s = 0.f, dp = 0.f;
        for (int c = 0; c < hs; c++) {
          s += Qs[i * hs + c] * Ks[j * ks + c];
          dp += dOs[i * hs + c] * Vs[j * ks + c];
        }
        p = __expf(s * scale - L[q0 + i]);
        ds = p * (dp - Dr[q0 + i]);
      }
      Ps[idx] = p;
      dSs[idx] = ds;
    }
    __syncthreads();
    for (int idx = tid; idx < BC * hs; idx += NT) {
      int j = idx / hs, c = idx % hs;
      float av = 0.f, ak = 0.f;
      for (int i = 0; i < BR; i++) {
        av += Ps[i * BC + j] * dOs[i * hs + c];
        ak += dSs[i * BC + j] * Qs[i * hs + c];
      }
      dVs[idx] += av;
      dKs[idx] += ak * scale;
    }
    for (int idx = tid; idx < BR * hs; idx += NT) {
      int i = idx / hs, c = idx % hs;
      if (q0 + i >= T) continue;
      float aq = 0.f;
      for (int j = 0; j < BC; j++) aq += dSs[i * BC + j] * Ks[j * ks + c];
      if (aq != 0.f) atomicAdd(dbase + (size_t)(q0 + i) * C3 + c, aq * scale);
    }
  }
  __syncthreads();
  for (int idx = tid; idx < BC * hs; idx += NT) {
    int j = idx / hs, c = idx % hs;
    if (k0 + j >= T) continue;
    dbase[(size_t)(k0 + j) * C3 + C + c] += dKs[idx];
    dbase[(size_t)(k0 + j) * C3 + 2 * C + c] += dVs[idx];
  }
}

/* The tiles of one block live in shared memory, so the head size is bounded
 * by the device's opt-in limit (227 KiB on H100: head sizes up to 599 in the
 * backward); the grid puts heads in y and batches in z (at most 65535 each). */
static int attn_launch_check(tensor_ctx_t *ctx, const char *fn, const void *kernel, size_t bytes,
                             int B, int NH, int hs, int device) {
  int optin = 0;
  if (B > 65535 || NH > 65535)
    return tensor_seterr(ctx, STRATA_EUNSUPPORTED,
                         "%s: batch %d and heads %d must each be <= 65535 on CUDA", fn, B, NH);
  CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > (size_t)optin)
    return tensor_seterr(ctx, STRATA_EUNSUPPORTED,
                         "%s: head size %d needs %zu bytes of shared memory per block; cuda:%d allows %d",
                         fn, hs, bytes, device, optin);
  if (bytes > 48 * 1024) /* above the default, a kernel must opt in */
    CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  return STRATA_OK;
}

extern "C" int tcu_attention_forward(tensor_ctx_t *ctx, void *outp, float *lse, const void *qkvp, int adt,
                                     int B, int T, int C, int NH) {
  int rc = tcu_sdpa_forward(ctx, outp, lse, qkvp, adt, B, T, C, NH);
  if (rc != TCU_SDPA_DECLINED) return rc;
  if (adt != TENSOR_F32) return STRATA_EUNSUPPORTED; /* the caller runs this on f32 copies */
  float *out = (float *)outp;
  const float *qkv = (const float *)qkvp;
  tcu_state *s;
  rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  int hs = C / NH;
  size_t smem = sizeof(float) * ((size_t)2 * BR * hs + 2 * BC * (hs + 1) + BR * BC + 3 * BR);
  rc = attn_launch_check(ctx, "tensor_attention_forward", (const void *)k_attn_fwd, smem, B, NH, hs,
                         s->device);
  if (rc) return rc;
  dim3 grid((T + BR - 1) / BR, NH, B);
  k_attn_fwd<<<grid, NT, smem>>>(out, lse, qkv, T, C, NH, 1.f / sqrtf((float)hs));
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_attention_backward(tensor_ctx_t *ctx, void *dqkvp, const void *doutp,
                                      const void *qkvp, const void *outp, int adt, const float *lse, int B,
                                      int T, int C, int NH) {
  int rc = tcu_sdpa_backward(ctx, dqkvp, doutp, qkvp, outp, adt, lse, B, T, C, NH);
  if (rc != TCU_SDPA_DECLINED) return rc;
  if (adt != TENSOR_F32) return STRATA_EUNSUPPORTED; /* the caller runs this on f32 copies */
  float *dqkv = (float *)dqkvp;
  const float *dout = (const float *)doutp, *qkv = (const float *)qkvp, *out = (const float *)outp;
  tcu_state *s;
  rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  int hs = C / NH;
  int64_t rows = (int64_t)B * NH * T;
  size_t smem = sizeof(float) * ((size_t)2 * BC * (hs + 1) + 2 * BC * hs + 2 * BR * hs + 2 * BR * BC);
  rc = attn_launch_check(ctx, "tensor_attention_backward", (const void *)k_attn_bwd, smem, B, NH, hs,
                         s->device);
  if (rc) return rc;
  void *scr;
  rc = tcu_scratch(ctx, (size_t)rows * sizeof(float), &scr);
  if (rc) return rc;
  float *D = (float *)scr;
  k_attn_D<<<(unsigned)((rows + 7) / 8), 256>>>(D, dout, out, B, T, C, NH);
  LAUNCHED();
  dim3 grid((T + BC - 1) / BC, NH, B);
  k_attn_bwd<<<grid, NT, smem>>>(dqkv, dout, qkv, lse, D, T, C, NH, 1.f / sqrtf((float)hs));
  LAUNCHED();
  return STRATA_OK;
}

/* One query per (batch, head) against len cached positions: a block per
 * (head, batch); scores in shared memory, reduced for max and sum. */
__global__ void k_attn_decode(float *out, const float *q, const float *k, const float *v, int Tmax,
                              int C, int hs, int len, float scale) {
  extern __shared__ float sh[]; /* len scores, then NT for reductions */
  float *p = sh, *red = sh + len;
  int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const float *qh = q + (size_t)b * C + (size_t)h * hs;
  float m = -INFINITY;
  for (int t = tid; t < len; t += NT) {
    const float *kt = k + ((size_t)b * Tmax + t) * C + (size_t)h * hs;
    float s = 0.f;
    for (int d = 0; d < hs; d++) s += qh[d] * kt[d];
    p[t] = s * scale;
    m = fmaxf(m, p[t]);
  }
  red[tid] = m;
  __syncthreads();
  for (int w = NT / 2; w > 0; w /= 2) {
    if (tid < w) red[tid] = fmaxf(red[tid], red[tid + w]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int t = tid; t < len; t += NT) sum += (p[t] = __expf(p[t] - m));
  red[tid] = sum;
  __syncthreads();
  for (int w = NT / 2; w > 0; w /= 2) {
    if (tid < w) red[tid] += red[tid + w];
    __syncthreads();
  }
  float inv = 1.f / red[0];
  for (int d = tid; d < hs; d += NT) {
    float o = 0.f;
    for (int t = 0; t < len; t++) o += p[t] * v[((size_t)b * Tmax + t) * C + (size_t)h * hs + d];
    out[(size_t)b * C + (size_t)h * hs + d] = o * inv;
  }
}

extern "C" int tcu_attention_decode(tensor_ctx_t *ctx, float *out, const float *q, const float *k,
                                    const float *v, int B, int Tmax, int C, int NH, int len) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  int hs = C / NH;
  size_t smem = sizeof(float) * ((size_t)len + NT);
  rc = attn_launch_check(ctx, "tensor_attention_decode", (const void *)k_attn_decode, smem, NH, B, hs,
                         s->device);
  if (rc) return rc;
  dim3 grid(NH, B);
  k_attn_decode<<<grid, NT, smem>>>(out, q, k, v, Tmax, C, hs, len, 1.f / sqrtf((float)hs));
  LAUNCHED();
  return STRATA_OK;
}
