/* The CUDA twins of attention_block.c: causal attention by blocks of keys
 * for ring self-attention (sequence parallelism), with the running maximum
 * m and sum l of FlashAttention's online softmax (Dao et al. 2022,
 * algorithm 1 lines 9-12) carried across blocks, and the backward of a
 * block from the final log-sum-exp (algorithm 2). Positions are global: key
 * j of a block starting at k0 is visible to query i of a block starting at
 * q0 when k0 + j <= q0 + i.
 *
 * One warp per row, written for exactness against the CPU kernels rather
 * than for speed (a block is Tl x Tl, sp times smaller than the sequence):
 * keys (or queries) go 32 at a time, one to a lane, each lane's score a
 * sequential dot product of hs terms, the chunk's maximum and sum by warp
 * shuffles; the output (or gradient) row, hs floats, is updated by the lanes
 * in columns. The backward runs twice over the block's scores, once per
 * query row (dq) and once per key row (dk, dv), so that every row is
 * written by one warp: no atomics, results independent of scheduling.
 * f32 throughout, expf (not __expf) as the CPU. */
#include "common.cuh"

#define WARPS 4 /* rows per block of threads */

/* Keys of the block query i sees: [0, visible). */
__device__ __forceinline__ int visible(int64_t q0, int64_t k0, int i, int Tk) {
  int64_t n = q0 + i - k0 + 1;
  return n <= 0 ? 0 : n >= Tk ? Tk : (int)n;
}

/* Queries of the block that see key j: [first, Tq). */
__device__ __forceinline__ int first_query(int64_t q0, int64_t k0, int j, int Tq) {
  int64_t f = k0 + j - q0;
  return f <= 0 ? 0 : f >= Tq ? Tq : (int)f;
}

/* Row r = (b h) Tq + i: acc row i of head h gains this block, m and l move on. */
__global__ void k_block_fwd(float *acc, float *m, float *l, const float *q, const float *k, const float *v, int B,
                            int Tq, int Tk, int C, int NH, int64_t q0, int64_t k0, float scale) {
  extern __shared__ float sh[]; /* WARPS query rows of hs */
  int hs = C / NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t r = (int64_t)blockIdx.x * WARPS + warp;
  if (r >= (int64_t)B * NH * Tq) return;
  int i = (int)(r % Tq), bh = (int)(r / Tq), b = bh / NH, h = bh % NH;
  int n = visible(q0, k0, i, Tk);
  if (n == 0) return;
  float *qs = sh + warp * hs;
  const float *qr = q + ((size_t)b * Tq + i) * C + (size_t)h * hs;
  for (int c = lane; c < hs; c += 32) qs[c] = qr[c];
  __syncwarp();
  float *a = acc + ((size_t)b * Tq + i) * C + (size_t)h * hs;
  const float *kb = k + (size_t)b * Tk * C + (size_t)h * hs, *vb = v + (size_t)b * Tk * C + (size_t)h * hs;
  float M = m[r], L = l[r];
  for (int j0 = 0; j0 < n; j0 += 32) {
    int j = j0 + lane, cnt = min(32, n - j0);
    float s = -INFINITY;
    if (j < n) {
      const float *kr = kb + (size_t)j * C;
      float d = 0.f;
      for (int c = 0; c < hs; c++) d += qs[c] * kr[c];
      s = d * scale;
    }
    float mx = warp_max(s), mnew = fmaxf(M, mx);
    float p = j < n ? expf(s - mnew) : 0.f, sum = warp_sum(p);
    float alpha = M == -INFINITY ? 0.f : expf(M - mnew);
    for (int c0 = 0; c0 < hs; c0 += 32) { /* every lane in every shuffle, with a column or not */
      int c = c0 + lane;
      float val = c < hs ? a[c] * alpha : 0.f;
      for (int jj = 0; jj < cnt; jj++) {
        float w = __shfl_sync(0xffffffffu, p, jj);
        if (c < hs) val += w * vb[(size_t)(j0 + jj) * C + c];
      }
      if (c < hs) a[c] = val;
    }
    L = L * alpha + sum, M = mnew;
  }
  if (lane == 0) m[r] = M, l[r] = L;
}

__global__ void k_block_finish(float *out, float *lse, const float *acc, const float *m, const float *l, int B,
                               int T, int C, int NH) {
  int hs = C / NH;
  int64_t n = (int64_t)B * T * C;
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) {
    int c = (int)(x % C), i = (int)((x / C) % T), b = (int)(x / ((int64_t)T * C)), h = c / hs;
    size_t r = ((size_t)b * NH + h) * T + i;
    out[x] = acc[x] * (1.f / l[r]);
    if (c % hs == 0) lse[r] = m[r] + logf(l[r]);
  }
}

/* d[(b h) T + i] = dout_i . out_i over the head's columns. */
__global__ void k_block_rowdot(float *d, const float *dout, const float *out, int B, int T, int C, int NH) {
  int hs = C / NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t r = (int64_t)blockIdx.x * WARPS + warp;
  if (r >= (int64_t)B * NH * T) return;
  int i = (int)(r % T), bh = (int)(r / T), b = bh / NH, h = bh % NH;
  size_t o = ((size_t)b * T + i) * C + (size_t)h * hs;
  float s = 0.f;
  for (int c = lane; c < hs; c += 32) s += dout[o + c] * out[o + c];
  s = warp_sum(s);
  if (lane == 0) d[r] = s;
}

/* dq row i += scale sum_j dS_ij k_j, dS_ij = P_ij (dout_i . v_j - D_i),
 * P_ij = exp(s_ij - lse_i). */
__global__ void k_block_bwd_dq(float *dq, const float *dout, const float *q, const float *k, const float *v,
                               const float *lse, const float *D, int B, int Tq, int Tk, int C, int NH, int64_t q0,
                               int64_t k0, float scale) {
  extern __shared__ float sh[]; /* WARPS x (q row, dout row) */
  int hs = C / NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t r = (int64_t)blockIdx.x * WARPS + warp;
  if (r >= (int64_t)B * NH * Tq) return;
  int i = (int)(r % Tq), bh = (int)(r / Tq), b = bh / NH, h = bh % NH;
  int n = visible(q0, k0, i, Tk);
  if (n == 0) return;
  float *qs = sh + warp * 2 * hs, *gs = qs + hs;
  size_t qo = ((size_t)b * Tq + i) * C + (size_t)h * hs;
  for (int c = lane; c < hs; c += 32) qs[c] = q[qo + c], gs[c] = dout[qo + c];
  __syncwarp();
  const float *kb = k + (size_t)b * Tk * C + (size_t)h * hs, *vb = v + (size_t)b * Tk * C + (size_t)h * hs;
  float Li = lse[r], Di = D[r];
  for (int j0 = 0; j0 < n; j0 += 32) {
    int j = j0 + lane, cnt = min(32, n - j0);
    float ds = 0.f;
    if (j < n) {
      const float *kr = kb + (size_t)j * C, *vr = vb + (size_t)j * C;
      float sd = 0.f, dp = 0.f;
      for (int c = 0; c < hs; c++) sd += qs[c] * kr[c], dp += gs[c] * vr[c];
      ds = expf(sd * scale - Li) * (dp - Di);
    }
    for (int c0 = 0; c0 < hs; c0 += 32) { /* every lane in every shuffle */
      int c = c0 + lane;
      float val = 0.f;
      for (int jj = 0; jj < cnt; jj++) {
        float w = __shfl_sync(0xffffffffu, ds, jj);
        if (c < hs) val += w * kb[(size_t)(j0 + jj) * C + c];
      }
      if (c < hs) dq[qo + c] += scale * val;
    }
  }
}

/* Key row j: dv_j += sum_i P_ij dout_i, dk_j += scale sum_i dS_ij q_i. */
__global__ void k_block_bwd_dkv(float *dk, float *dv, const float *dout, const float *q, const float *k,
                                const float *v, const float *lse, const float *D, int B, int Tq, int Tk, int C,
                                int NH, int64_t q0, int64_t k0, float scale) {
  extern __shared__ float sh[]; /* WARPS x (k row, v row) */
  int hs = C / NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t r = (int64_t)blockIdx.x * WARPS + warp;
  if (r >= (int64_t)B * NH * Tk) return;
  int j = (int)(r % Tk), bh = (int)(r / Tk), b = bh / NH, h = bh % NH;
  int f = first_query(q0, k0, j, Tq);
  if (f == Tq) return;
  float *ks = sh + warp * 2 * hs, *vs = ks + hs;
  size_t ko = ((size_t)b * Tk + j) * C + (size_t)h * hs;
  for (int c = lane; c < hs; c += 32) ks[c] = k[ko + c], vs[c] = v[ko + c];
  __syncwarp();
  const float *qb = q + (size_t)b * Tq * C + (size_t)h * hs, *gb = dout + (size_t)b * Tq * C + (size_t)h * hs;
  const float *Lb = lse + (size_t)bh * Tq, *Db = D + (size_t)bh * Tq;
  for (int i0 = f; i0 < Tq; i0 += 32) {
    int i = i0 + lane, cnt = min(32, Tq - i0);
    float p = 0.f, ds = 0.f;
    if (i < Tq) {
      const float *qr = qb + (size_t)i * C, *gr = gb + (size_t)i * C;
      float sd = 0.f, dp = 0.f;
      for (int c = 0; c < hs; c++) sd += qr[c] * ks[c], dp += gr[c] * vs[c];
      p = expf(sd * scale - Lb[i]);
      ds = p * (dp - Db[i]);
    }
    for (int c0 = 0; c0 < hs; c0 += 32) {
      int c = c0 + lane;
      float gv = 0.f, gk = 0.f;
      for (int ii = 0; ii < cnt; ii++) {
        float wp = __shfl_sync(0xffffffffu, p, ii), wd = __shfl_sync(0xffffffffu, ds, ii);
        if (c < hs) {
          size_t o = (size_t)(i0 + ii) * C + c;
          gv += wp * gb[o], gk += wd * qb[o];
        }
      }
      if (c < hs) dv[ko + c] += gv, dk[ko + c] += scale * gk;
    }
  }
}

static int block_launch_check(tensor_ctx_t *ctx, const char *fn, const void *kernel, size_t bytes, int device) {
  int optin = 0;
  CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > (size_t)optin)
    return tensor_seterr(ctx, STRATA_EUNSUPPORTED, "%s: %zu bytes of shared memory per block; cuda:%d allows %d", fn,
                         bytes, device, optin);
  if (bytes > 48 * 1024) CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  return STRATA_OK;
}

static unsigned row_blocks(int64_t rows) { return (unsigned)((rows + WARPS - 1) / WARPS); }

extern "C" int tcu_attention_block_forward(tensor_ctx_t *ctx, float *acc, float *m, float *l, const float *q,
                                           const float *k, const float *v, int B, int Tq, int Tk, int C, int NH,
                                           int64_t q0, int64_t k0) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s), hs = C / NH;
  if (rc) return rc;
  int64_t rows = (int64_t)B * NH * Tq;
  if (rows == 0 || Tk == 0) return STRATA_OK;
  size_t smem = sizeof(float) * (size_t)WARPS * hs;
  if ((rc = block_launch_check(ctx, "tensor_attention_block_forward", (const void *)k_block_fwd, smem, s->device)))
    return rc;
  k_block_fwd<<<row_blocks(rows), 32 * WARPS, smem>>>(acc, m, l, q, k, v, B, Tq, Tk, C, NH, q0, k0,
                                                      1.f / sqrtf((float)hs));
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_attention_block_finish(tensor_ctx_t *ctx, float *out, float *lse, const float *acc,
                                          const float *m, const float *l, int B, int T, int C, int NH) {
  int64_t n = (int64_t)B * T * C;
  if (n == 0) return STRATA_OK;
  k_block_finish<<<blocks_for(n, 256), 256>>>(out, lse, acc, m, l, B, T, C, NH);
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_attention_block_rowdot(tensor_ctx_t *ctx, float *d, const float *dout, const float *out, int B,
                                          int T, int C, int NH) {
  int64_t rows = (int64_t)B * NH * T;
  if (rows == 0) return STRATA_OK;
  k_block_rowdot<<<row_blocks(rows), 32 * WARPS>>>(d, dout, out, B, T, C, NH);
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_attention_block_backward(tensor_ctx_t *ctx, float *dq, float *dk, float *dv, const float *dout,
                                            const float *q, const float *k, const float *v, const float *lse,
                                            const float *D, int B, int Tq, int Tk, int C, int NH, int64_t q0,
                                            int64_t k0) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s), hs = C / NH;
  if (rc) return rc;
  if ((int64_t)B * NH * Tq == 0 || Tk == 0) return STRATA_OK;
  size_t smem = sizeof(float) * (size_t)WARPS * 2 * hs;
  float scale = 1.f / sqrtf((float)hs);
  if ((rc = block_launch_check(ctx, "tensor_attention_block_backward", (const void *)k_block_bwd_dq, smem,
                               s->device)) ||
      (rc = block_launch_check(ctx, "tensor_attention_block_backward", (const void *)k_block_bwd_dkv, smem,
                               s->device)))
    return rc;
  k_block_bwd_dq<<<row_blocks((int64_t)B * NH * Tq), 32 * WARPS, smem>>>(dq, dout, q, k, v, lse, D, B, Tq, Tk, C, NH,
                                                                          q0, k0, scale);
  LAUNCHED();
  k_block_bwd_dkv<<<row_blocks((int64_t)B * NH * Tk), 32 * WARPS, smem>>>(dk, dv, dout, q, k, v, lse, D, B, Tq, Tk,
                                                                           C, NH, q0, k0, scale);
  LAUNCHED();
  return STRATA_OK;
}
