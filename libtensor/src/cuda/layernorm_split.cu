/* CUDA twins of tensor_layernorm_split_* and tensor_transpose
 * (layernorm_split.c). Row sums: one warp a row, each lane's part and the
 * warp's sum in double (the CPU sums a row in double in column order: the
 * two differ by the rounding of the final float only, for the row widths
 * a rank holds). Column sums (dweight, dbias): one thread a column, over
 * the rows in order, in float as the CPU. Elementwise phases: the CPU's
 * expressions. The transpose: 32 x 32 tiles through shared memory. */
#include "common.cuh"

__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

#define ROWS_PER_BLOCK 8 /* warps of 32: 256 threads */

/* phase 0: mean = row sums; phase 1: mean /= C, rstd = sums of (x - mean)^2. */
__global__ void k_split_ln_sums(float *mean, float *rstd, const float *x, int64_t R, int64_t A, int64_t C,
                                int phase) {
  int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= R) return; /* (a whole warp leaves together) */
  const float *xr = x + r * A;
  double s = 0;
  if (phase == 0) {
    for (int64_t c = lane; c < A; c += 32) s += xr[c];
    s = warp_sum_d(s);
    if (lane == 0) mean[r] = (float)s;
  } else {
    float m = mean[r] / (float)C;
    for (int64_t c = lane; c < A; c += 32) {
      double d = xr[c] - m;
      s += d * d;
    }
    s = warp_sum_d(s);
    if (lane == 0) mean[r] = m, rstd[r] = (float)s;
  }
}

__global__ void k_split_ln_rstd(float *rstd, int64_t R, int64_t C, float eps) {
  int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (r < R) rstd[r] = 1.f / sqrtf(rstd[r] / (float)C + eps);
}

__global__ void k_split_ln_apply(float *y, const float *x, const float *mean, const float *rstd, const float *w,
                                 const float *b, int64_t R, int64_t A) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < R * A; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / A, c = i % A;
    y[i] = (x[i] - mean[r]) * rstd[r] * w[c] + b[c];
  }
}

/* stats[2r], stats[2r + 1] = the row's sums of g = dy w and of g xh. */
__global__ void k_split_ln_bstats(float *st, const float *dy, const float *x, const float *w, const float *mean,
                                  const float *rstd, int64_t R, int64_t A) {
  int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= R) return;
  float m = mean[r], q = rstd[r];
  double a = 0, bs = 0;
  for (int64_t c = lane; c < A; c += 32) {
    float xh = (x[r * A + c] - m) * q, g = dy[r * A + c] * w[c];
    a += g, bs += g * xh;
  }
  a = warp_sum_d(a), bs = warp_sum_d(bs);
  if (lane == 0) st[2 * r] = (float)a, st[2 * r + 1] = (float)bs;
}

/* dw[c] += sum_r dy xh, db[c] += sum_r dy: one thread a column, rows in order. */
__global__ void k_split_ln_params(float *dw, float *db, const float *dy, const float *x, const float *mean,
                                  const float *rstd, int64_t R, int64_t A) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= A) return;
  float sw = dw ? dw[c] : 0.f, sb = db ? db[c] : 0.f;
  for (int64_t r = 0; r < R; r++) {
    float g = dy[r * A + c];
    sw += g * ((x[r * A + c] - mean[r]) * rstd[r]);
    sb += g;
  }
  if (dw) dw[c] = sw;
  if (db) db[c] = sb;
}

__global__ void k_split_ln_dx(float *dx, const float *st, const float *dy, const float *x, const float *w,
                              const float *mean, const float *rstd, int64_t R, int64_t A, float inv) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < R * A; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / A, c = i % A;
    float xh = (x[i] - mean[r]) * rstd[r], g = dy[i] * w[c];
    dx[i] += rstd[r] * (g - st[2 * r] * inv - xh * st[2 * r + 1] * inv);
  }
}

static unsigned row_blocks(int64_t R) { return (unsigned)((R + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

extern "C" int tcu_layernorm_split_forward(tensor_ctx_t *ctx, float *out, float *mean, float *rstd, const float *in,
                                           const float *w, const float *b, int64_t R, int64_t A, int64_t C,
                                           float eps, int phase) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  if (R < 1) return STRATA_OK;
  if (phase < 2) {
    k_split_ln_sums<<<row_blocks(R), 32 * ROWS_PER_BLOCK>>>(mean, rstd, in, R, A, C, phase);
  } else {
    k_split_ln_rstd<<<blocks_for(R, 256), 256>>>(rstd, R, C, eps);
    LAUNCHED();
    k_split_ln_apply<<<blocks_for(R * A, 256), 256>>>(out, in, mean, rstd, w, b, R, A);
  }
  LAUNCHED();
  return STRATA_OK;
}

extern "C" int tcu_layernorm_split_backward(tensor_ctx_t *ctx, float *din, float *dw, float *db, float *stats,
                                            const float *dout, const float *in, const float *w, const float *mean,
                                            const float *rstd, int64_t R, int64_t A, int64_t C, int phase) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  if (R < 1) return STRATA_OK;
  if (phase == 0) {
    k_split_ln_bstats<<<row_blocks(R), 32 * ROWS_PER_BLOCK>>>(stats, dout, in, w, mean, rstd, R, A);
    LAUNCHED();
    if (dw || db) {
      k_split_ln_params<<<blocks_for(A, 128), 128>>>(dw, db, dout, in, mean, rstd, R, A);
      LAUNCHED();
    }
  } else {
    k_split_ln_dx<<<blocks_for(R * A, 256), 256>>>(din, stats, dout, in, w, mean, rstd, R, A, 1.f / (float)C);
    LAUNCHED();
  }
  return STRATA_OK;
}

#define TILE 32
/* out (c x r) = in (r x c)^T, or += it. 32 x 8 threads a tile. */
__global__ void k_transpose(float *out, const float *in, int64_t r, int64_t c, int accumulate) {
  __shared__ float tile[TILE][TILE + 1];
  int64_t i0 = (int64_t)blockIdx.y * TILE, j0 = (int64_t)blockIdx.x * TILE;
  for (int k = threadIdx.y; k < TILE; k += blockDim.y) {
    int64_t i = i0 + k, j = j0 + threadIdx.x;
    if (i < r && j < c) tile[k][threadIdx.x] = in[i * c + j];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < TILE; k += blockDim.y) {
    int64_t j = j0 + k, i = i0 + threadIdx.x; /* out row j, column i */
    if (i < r && j < c) {
      float v = tile[threadIdx.x][k];
      if (accumulate) out[j * r + i] += v;
      else out[j * r + i] = v;
    }
  }
}

extern "C" int tcu_transpose(tensor_ctx_t *ctx, float *out, const float *in, int64_t r, int64_t c, int accumulate) {
  tcu_state *s;
  int rc = tcu_state_get(ctx, &s);
  if (rc) return rc;
  if (r < 1 || c < 1) return STRATA_OK;
  int64_t gx = (c + TILE - 1) / TILE, gy = (r + TILE - 1) / TILE;
  if (gy > 65535)
    return tensor_seterr(ctx, STRATA_EINVAL, "tensor_transpose: %lld rows exceed the kernel's grid (%d)", (long long)r,
                         65535 * TILE);
  dim3 grid((unsigned)gx, (unsigned)gy), block(TILE, 8);
  k_transpose<<<grid, block>>>(out, in, r, c, accumulate);
  LAUNCHED();
  return STRATA_OK;
}
