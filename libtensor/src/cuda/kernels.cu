/* CUDA twins of layernorm, embedding and the fused softmax cross-entropy. */
#include "common.cuh"

#define STATE()                                                                                    \
  tcu_state *s;                                                                                    \
  int rc = tcu_state_get(ctx, &s);                                                                 \
  if (rc) return rc

/* ---- layernorm: one warp per row; A the activations' storage type, the
 * statistics and every sum in f32 ---- */

template <typename A>
__global__ void k_ln_fwd(A *out, float *mean, float *rstd, const A *in, const float *w,
                         const float *b, int64_t rows, int C, float eps) {
  int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const A *x = in + r * C;
  float sum = 0.f;
  for (int i = lane; i < C; i += 32) sum += ldf(x + i);
  float m = warp_sum(sum) / C, v = 0.f;
  for (int i = lane; i < C; i += 32) v += (ldf(x + i) - m) * (ldf(x + i) - m);
  float q = rsqrtf(warp_sum(v) / C + eps);
  for (int i = lane; i < C; i += 32) stf(out + r * C + i, (ldf(x + i) - m) * q * w[i] + (b ? b[i] : 0.f));
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = q;
  }
}

template <typename A>
__global__ void k_ln_dx(A *din, const A *dout, const A *in, const float *w,
                        const float *mean, const float *rstd, int64_t rows, int C) {
  int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const A *x = in + r * C, *g = dout + r * C;
  float m = mean[r], q = rstd[r], a = 0.f, bs = 0.f;
  for (int i = lane; i < C; i += 32) {
    float dn = ldf(g + i) * w[i];
    a += dn;
    bs += dn * (ldf(x + i) - m) * q;
  }
  a = warp_sum(a) / C;
  bs = warp_sum(bs) / C;
  for (int i = lane; i < C; i += 32) {
    A *d = din + r * C + i;
    stf(d, ldf(d) + q * (ldf(g + i) * w[i] - a - (ldf(x + i) - m) * q * bs));
  }
}

template <typename A>
__global__ void k_ln_wgrad(float *dw, float *db, const A *dout, const A *in,
                           const float *mean, const float *rstd, int64_t rows, int C, int64_t chunk) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  float aw = 0.f, ab = 0.f;
  for (int64_t r = r0; r < r1; r++) {
    float g = ldf(dout + r * C + c);
    aw += g * (ldf(in + r * C + c) - mean[r]) * rstd[r];
    ab += g;
  }
  if (dw) atomicAdd(dw + c, aw);
  if (db) atomicAdd(db + c, ab);
}

extern "C" int tcu_layernorm_forward(tensor_ctx_t *ctx, void *out, float *mean, float *rstd,
                                     const void *in, int adt, const float *w, const float *b, int64_t rows,
                                     int C, float eps) {
  STATE();
  ACT_DISPATCH(adt, k_ln_fwd<A><<<(unsigned)((rows + 7) / 8), 256>>>((A *)out, mean, rstd, (const A *)in, w, b,
                                                                       rows, C, eps));
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_layernorm_backward(tensor_ctx_t *ctx, void *din, float *dw, float *db,
                                      const void *dout, const void *in, int adt, const float *w,
                                      const float *mean, const float *rstd, int64_t rows, int C) {
  STATE();
  if (din) {
    ACT_DISPATCH(adt, k_ln_dx<A><<<(unsigned)((rows + 7) / 8), 256>>>((A *)din, (const A *)dout, (const A *)in,
                                                                        w, mean, rstd, rows, C));
    LAUNCHED();
  }
  if (dw || db) {
    int64_t chunk = 64, gy = (rows + chunk - 1) / chunk;
    if (gy > 65535) chunk = (rows + 65534) / 65535, gy = (rows + chunk - 1) / chunk;
    dim3 grid((C + 127) / 128, (unsigned)gy);
    ACT_DISPATCH(adt, k_ln_wgrad<A><<<grid, 128>>>(dw, db, (const A *)dout, (const A *)in, mean, rstd, rows, C,
                                                   chunk));
    LAUNCHED();
  }
  return STRATA_OK;
}

/* ---- embedding (f32 tables, activations of type A) ---- */

/* slice: wte holds rows [lo, lo + V) of a split vocabulary; another
 * rank's id gives the position only. */
template <typename A>
__global__ void k_emb_fwd(A *out, int *flag, const int32_t *ids, const float *wte,
                          const float *wpe, int B, int T, int C, int V, int64_t lo, int slice) {
  int64_t n = (int64_t)B * T * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T), id = ids[bt];
    int64_t local = (int64_t)id - lo;
    float pos = wpe ? wpe[(int64_t)t * C + c] : 0.f;
    if (id < 0 || local < 0 || local >= V) {
      if (id < 0 || !slice) *flag = 1;
      stf(out + i, slice ? pos : 0.f);
      continue;
    }
    stf(out + i, wte[local * C + c] + pos);
  }
}

template <typename A>
__global__ void k_emb_bwd(float *dwte, float *dwpe, const A *dout, const int32_t *ids, int B,
                          int T, int C, int V, int64_t lo) {
  int64_t n = (int64_t)B * T * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T), id = ids[bt];
    int64_t local = (int64_t)id - lo;
    float g = ldf(dout + i);
    if (dwte && id >= 0 && local >= 0 && local < V) atomicAdd(dwte + local * C + c, g);
    if (dwpe) atomicAdd(dwpe + (int64_t)t * C + c, g);
  }
}

extern "C" int tcu_embedding_forward(tensor_ctx_t *ctx, void *out, int adt, const int32_t *ids,
                                     const float *wte, const float *wpe, int B, int T, int C, int V,
                                     int64_t lo, int slice) {
  STATE();
  ACT_DISPATCH(adt, k_emb_fwd<A><<<blocks_for((int64_t)B * T * C, 256), 256>>>((A *)out, s->flag, ids, wte, wpe,
                                                                                B, T, C, V, lo, slice));
  LAUNCHED();
  FLAG_CHECK("tensor_embedding_forward: an id is outside [0, %d)", V);
  return STRATA_OK;
}

extern "C" int tcu_embedding_backward(tensor_ctx_t *ctx, float *dwte, float *dwpe, const void *dout, int adt,
                                      const int32_t *ids, int B, int T, int C, int V, int64_t lo) {
  STATE();
  ACT_DISPATCH(adt, k_emb_bwd<A><<<blocks_for((int64_t)B * T * C, 256), 256>>>(dwte, dwpe, (const A *)dout, ids,
                                                                                B, T, C, V, lo));
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
    stf(d + i, g);
  }
}

extern "C" int tcu_classifier_rows(tensor_ctx_t *ctx, float *losses, float *lse, void *dz, int dz_dt,
                                   const float *z, const int32_t *targets, int64_t n, int V, float dloss) {
  STATE();
  ACT_DISPATCH(dz ? dz_dt : TENSOR_F32,
               k_classifier<A><<<(unsigned)n, 512>>>(losses, lse, s->flag, (A *)dz, z, targets, V, dloss));
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

template <typename A>
__global__ void k_ln_res_fwd(A *resid, A *out, float *mean, float *rstd, const A *a,
                             const A *b, const float *w, const float *bias, int64_t rows, int C,
                             float eps) {
  int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const A *ar = a + r * C, *br = b + r * C;
  A *x = resid + r * C;
  float sum = 0.f;
  for (int i = lane; i < C; i += 32) {
    stf(x + i, ldf(ar + i) + ldf(br + i));
    sum += ldf(x + i); /* the stored (rounded) sum, which backward reads; by this lane only:
                          resid may alias a or b */
  }
  float m = warp_sum(sum) / C, v = 0.f;
  for (int i = lane; i < C; i += 32) v += (ldf(x + i) - m) * (ldf(x + i) - m);
  float q = rsqrtf(warp_sum(v) / C + eps);
  for (int i = lane; i < C; i += 32) stf(out + r * C + i, (ldf(x + i) - m) * q * w[i] + (bias ? bias[i] : 0.f));
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = q;
  }
}

extern "C" int tcu_residual_layernorm_forward(tensor_ctx_t *ctx, void *resid, void *out, float *mean,
                                              float *rstd, const void *a, const void *b, int adt, const float *w,
                                              const float *bias, int64_t rows, int C, float eps) {
  STATE();
  ACT_DISPATCH(adt, k_ln_res_fwd<A><<<(unsigned)((rows + 7) / 8), 256>>>((A *)resid, (A *)out, mean, rstd,
                                                                           (const A *)a, (const A *)b, w, bias,
                                                                           rows, C, eps));
  LAUNCHED();
  return STRATA_OK;
}
