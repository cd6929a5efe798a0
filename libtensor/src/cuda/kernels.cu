/* CUDA twins of layernorm, embedding and the fused softmax cross-entropy. */
#include "common.cuh"

#define STATE()                                                                                    \
  tcu_state *s;                                                                                    \
  int rc = tcu_state_get(ctx, &s);                                                                 \
  if (rc) return rc

/* ---- layernorm: one warp per row ---- */

__global__ void k_ln_fwd(float *out, float *mean, float *rstd, const float *in, const float *w,
                         const float *b, int64_t rows, int C, float eps) {
  int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const float *x = in + r * C;
  float sum = 0.f;
  for (int i = lane; i < C; i += 32) sum += x[i];
  float m = warp_sum(sum) / C, v = 0.f;
  for (int i = lane; i < C; i += 32) v += (x[i] - m) * (x[i] - m);
  float q = rsqrtf(warp_sum(v) / C + eps);
  for (int i = lane; i < C; i += 32) out[r * C + i] = (x[i] - m) * q * w[i] + (b ? b[i] : 0.f);
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = q;
  }
}

__global__ void k_ln_dx(float *din, const float *dout, const float *in, const float *w,
                        const float *mean, const float *rstd, int64_t rows, int C) {
  int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const float *x = in + r * C, *g = dout + r * C;
  float m = mean[r], q = rstd[r], a = 0.f, bs = 0.f;
  for (int i = lane; i < C; i += 32) {
    float dn = g[i] * w[i];
    a += dn;
    bs += dn * (x[i] - m) * q;
  }
  a = warp_sum(a) / C;
  bs = warp_sum(bs) / C;
  for (int i = lane; i < C; i += 32) din[r * C + i] += q * (g[i] * w[i] - a - (x[i] - m) * q * bs);
}

__global__ void k_ln_wgrad(float *dw, float *db, const float *dout, const float *in,
                           const float *mean, const float *rstd, int64_t rows, int C, int64_t chunk) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  float aw = 0.f, ab = 0.f;
  for (int64_t r = r0; r < r1; r++) {
    float g = dout[r * C + c];
    aw += g * (in[r * C + c] - mean[r]) * rstd[r];
    ab += g;
  }
  if (dw) atomicAdd(dw + c, aw);
  if (db) atomicAdd(db + c, ab);
}

extern "C" int tcu_layernorm_forward(tensor_ctx_t *ctx, float *out, float *mean, float *rstd,
                                     const float *in, const float *w, const float *b, int64_t rows,
                                     int C, float eps) {
  STATE();
  k_ln_fwd<<<(unsigned)((rows + 7) / 8), 256>>>(out, mean, rstd, in, w, b, rows, C, eps);
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_layernorm_backward(tensor_ctx_t *ctx, float *din, float *dw, float *db,
                                      const float *dout, const float *in, const float *w,
                                      const float *mean, const float *rstd, int64_t rows, int C) {
  STATE();
  if (din) {
    k_ln_dx<<<(unsigned)((rows + 7) / 8), 256>>>(din, dout, in, w, mean, rstd, rows, C);
    LAUNCHED();
  }
  if (dw || db) {
    int64_t chunk = 64, gy = (rows + chunk - 1) / chunk;
    if (gy > 65535) chunk = (rows + 65534) / 65535, gy = (rows + chunk - 1) / chunk;
    dim3 grid((C + 127) / 128, (unsigned)gy);
    k_ln_wgrad<<<grid, 128>>>(dw, db, dout, in, mean, rstd, rows, C, chunk);
    LAUNCHED();
  }
  return STRATA_OK;
}

/* ---- embedding ---- */

/* slice: wte holds rows [lo, lo + V) of a split vocabulary; another
 * rank's id gives the position only. */
__global__ void k_emb_fwd(float *out, int *flag, const int32_t *ids, const float *wte,
                          const float *wpe, int B, int T, int C, int V, int64_t lo, int slice) {
  int64_t n = (int64_t)B * T * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T), id = ids[bt];
    int64_t local = (int64_t)id - lo;
    float pos = wpe ? wpe[(int64_t)t * C + c] : 0.f;
    if (id < 0 || local < 0 || local >= V) {
      if (id < 0 || !slice) *flag = 1;
      out[i] = slice ? pos : 0.f;
      continue;
    }
    out[i] = wte[local * C + c] + pos;
  }
}

__global__ void k_emb_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *ids, int B,
                          int T, int C, int V, int64_t lo) {
  int64_t n = (int64_t)B * T * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T), id = ids[bt];
    int64_t local = (int64_t)id - lo;
    if (dwte && id >= 0 && local >= 0 && local < V) atomicAdd(dwte + local * C + c, dout[i]);
    if (dwpe) atomicAdd(dwpe + (int64_t)t * C + c, dout[i]);
  }
}

extern "C" int tcu_embedding_forward(tensor_ctx_t *ctx, float *out, const int32_t *ids,
                                     const float *wte, const float *wpe, int B, int T, int C, int V,
                                     int64_t lo, int slice) {
  STATE();
  k_emb_fwd<<<blocks_for((int64_t)B * T * C, 256), 256>>>(out, s->flag, ids, wte, wpe, B, T, C, V, lo, slice);
  LAUNCHED();
  FLAG_CHECK("tensor_embedding_forward: an id is outside [0, %d)", V);
  return STRATA_OK;
}

extern "C" int tcu_embedding_backward(tensor_ctx_t *ctx, float *dwte, float *dwpe, const float *dout,
                                      const int32_t *ids, int B, int T, int C, int V, int64_t lo) {
  STATE();
  k_emb_bwd<<<blocks_for((int64_t)B * T * C, 256), 256>>>(dwte, dwpe, dout, ids, B, T, C, V, lo);
  LAUNCHED();
  return STRATA_OK;
}

/* ---- softmax cross-entropy: one block per row ---- */

/* The log-sum-exp of row z (V values), on every thread of the block. */
__device__ float block_row_lse(const float *z, int V, float *sh) {
  float m = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, z[i]);
  m = block_max(m, sh);
  float sum = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(z[i] - m);
  sum = block_sum(sum, sh);
  return m + logf(sum);
}

/* A target >= V (the CPU path rejects it before computing) raises *flag. */
__global__ void k_xent_fwd(float *losses, float *lse, int *flag, const float *logits,
                           const int32_t *targets, int V) {
  __shared__ float sh[32];
  int64_t r = blockIdx.x;
  const float *z = logits + r * V;
  float l = block_row_lse(z, V, sh);
  if (threadIdx.x == 0) {
    int t = targets[r];
    lse[r] = l;
    losses[r] = t >= 0 && t < V ? l - z[t] : 0.f;
    if (t >= V) *flag = 1;
  }
}

/* slice: the logits are the vocabulary slice [lo, lo + V); a target
 * outside it (another rank's) takes the softmax part only. */
__global__ void k_xent_bwd(float *dlogits, int *flag, const float *logits, const float *lse,
                           const int32_t *targets, int V, float dloss, int64_t lo, int slice) {
  int64_t r = blockIdx.x;
  int t = targets[r];
  int64_t local = (int64_t)t - lo;
  if (!slice && t >= V && threadIdx.x == 0) *flag = 1;
  if (t < 0 || (!slice && t >= V)) return;
  const float *z = logits + r * V;
  float *d = dlogits + r * V, l = lse[r];
  for (int i = threadIdx.x; i < V; i += blockDim.x) d[i] += dloss * (expf(z[i] - l) - (i == local ? 1.f : 0.f));
}

__global__ void k_xent_slice_fwd(float *lse, float *zt, const float *logits, const int32_t *targets, int V,
                                 int64_t lo) {
  __shared__ float sh[32];
  int64_t r = blockIdx.x;
  const float *z = logits + r * V;
  float l = block_row_lse(z, V, sh);
  if (threadIdx.x == 0) {
    int t = targets[r];
    int64_t local = (int64_t)t - lo;
    lse[r] = l;
    zt[r] = t >= 0 && local >= 0 && local < V ? z[local] : 0.f;
  }
}

extern "C" int tcu_xent_forward(tensor_ctx_t *ctx, float *losses, float *lse, const float *logits,
                                const int32_t *targets, int64_t rows, int V) {
  STATE();
  k_xent_fwd<<<(unsigned)rows, 512>>>(losses, lse, s->flag, logits, targets, V);
  LAUNCHED();
  FLAG_CHECK("tensor_xent_forward: a target is >= V = %d", V);
  return STRATA_OK;
}

extern "C" int tcu_xent_slice_forward(tensor_ctx_t *ctx, float *lse, float *zt, const float *logits,
                                      const int32_t *targets, int64_t rows, int V, int64_t lo) {
  STATE();
  k_xent_slice_fwd<<<(unsigned)rows, 512>>>(lse, zt, logits, targets, V, lo);
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_xent_backward(tensor_ctx_t *ctx, float *dlogits, const float *logits, const float *lse,
                                 const int32_t *targets, int64_t rows, int V, float dloss, int64_t lo, int slice) {
  STATE();
  k_xent_bwd<<<(unsigned)rows, 512>>>(dlogits, s->flag, logits, lse, targets, V, dloss, lo, slice);
  LAUNCHED();
  FLAG_CHECK("tensor_xent_backward: a target is >= V = %d", V);
  return STRATA_OK;
}

/* ---- the fused classifier's rows (classifier.c): one block per row ---- */

/* Merges two partial (max, sum of exp(z - max)) pairs of the online
 * softmax (Milakov & Gimelshein, arXiv 1805.02867, alg. 3). */
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2, s = s2;
    return;
  }
  float mx = fmaxf(m, m2);
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

__device__ __forceinline__ void store_dz(float *p, float v) { *p = v; }
__device__ __forceinline__ void store_dz(__nv_bfloat16 *p, float v) { *p = __float2bfloat16(v); }

/* One pass over the row for its log-sum-exp (online), a second writing
 * dz = dloss (exp(z - lse) - [i == target]); each thread writes only the
 * elements it read, after the block's reductions, so dz may be z. */
template <typename DT>
__global__ void k_classifier(float *losses, float *lse, int *flag, DT *dz, const float *logits,
                             const int32_t *targets, int V, float dloss) {
  __shared__ float shm[32], shs[32];
  int64_t r = blockIdx.x;
  const float *z = logits + r * V;
  float m = -INFINITY, s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    float x = z[i];
    if (x > m) {
      s = s * expf(m - x) + 1.f;
      m = x;
    } else if (x != -INFINITY) {
      s += expf(x - m);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    lse_merge(m, s, m2, s2);
  }
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) shm[w] = m, shs[w] = s;
  __syncthreads();
  m = lane < nw ? shm[lane] : -INFINITY;
  s = lane < nw ? shs[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    lse_merge(m, s, m2, s2);
  }
  float l = m + logf(s);
  int t = targets[r];
  float zt = t >= 0 && t < V ? z[t] : 0.f; /* read before any thread overwrites it */
  __syncthreads();
  if (threadIdx.x == 0) {
    lse[r] = l;
    if (losses) losses[r] = t >= 0 && t < V ? l - zt : 0.f;
    if (t >= V) *flag = 1;
  }
  if (!dz) return;
  DT *d = dz + r * V;
  int live = t >= 0 && t < V;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    float g = live ? dloss * expf(z[i] - l) - (i == t ? dloss : 0.f) : 0.f;
    store_dz(d + i, g);
  }
}

extern "C" int tcu_classifier_rows(tensor_ctx_t *ctx, float *losses, float *lse, void *dz, int dz_dt,
                                   const float *z, const int32_t *targets, int64_t n, int V, float dloss) {
  STATE();
  if (dz && dz_dt == TENSOR_BF16)
    k_classifier<__nv_bfloat16><<<(unsigned)n, 512>>>(losses, lse, s->flag, (__nv_bfloat16 *)dz, z, targets, V, dloss);
  else
    k_classifier<float><<<(unsigned)n, 512>>>(losses, lse, s->flag, (float *)dz, z, targets, V, dloss);
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_classifier_check(tensor_ctx_t *ctx, int V) {
  STATE();
  FLAG_CHECK("tensor_classifier_xent: a target is >= V = %d", V);
  return STRATA_OK;
}

/* ---- residual add + layernorm: one warp per row, the sums in k_ln_fwd's
 * order, so the results are the separate kernels' bit for bit ---- */

__global__ void k_ln_res_fwd(float *resid, float *out, float *mean, float *rstd, const float *a,
                             const float *b, const float *w, const float *bias, int64_t rows, int C,
                             float eps) {
  int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const float *ar = a + r * C, *br = b + r * C;
  float *x = resid + r * C;
  float sum = 0.f;
  for (int i = lane; i < C; i += 32) {
    float v = ar[i] + br[i];
    x[i] = v; /* (read back by this lane only: resid may alias a or b) */
    sum += v;
  }
  float m = warp_sum(sum) / C, v = 0.f;
  for (int i = lane; i < C; i += 32) v += (x[i] - m) * (x[i] - m);
  float q = rsqrtf(warp_sum(v) / C + eps);
  for (int i = lane; i < C; i += 32) out[r * C + i] = (x[i] - m) * q * w[i] + (bias ? bias[i] : 0.f);
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = q;
  }
}

extern "C" int tcu_residual_layernorm_forward(tensor_ctx_t *ctx, float *resid, float *out, float *mean,
                                              float *rstd, const float *a, const float *b, const float *w,
                                              const float *bias, int64_t rows, int C, float eps) {
  STATE();
  k_ln_res_fwd<<<(unsigned)((rows + 7) / 8), 256>>>(resid, out, mean, rstd, a, b, w, bias, rows, C, eps);
  LAUNCHED();
  return STRATA_OK;
}
