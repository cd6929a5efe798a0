/* BENCH tensor.attention.cuda: causal self-attention forward + backward on
 * cuda:0 at GPT-2's shape (B 8, T 1024, 12 heads of 64), on a context with
 * bf16 matmuls, so cuDNN's fused flash attention runs where libcudnn.so.9
 * loads (strata's own kernel otherwise; stderr says which), in TFLOP/s
 * against a cuBLAS bf16 GEMM 8192^3 measured in the same run.
 *
 * FLOPs are counted as FlashAttention-2 counts them (Dao 2023, section 4):
 * the forward's two GEMMs are 4 B NH T^2 hs, halved for the causal mask
 * (only the lower triangle is computed), and the backward is 2.5 times the
 * forward (five GEMMs against two), so forward + backward = 3.5 x 2 B NH T^2
 * hs. The f32 <-> bf16 conversions strata adds around cuDNN are timed too.
 *
 *   bench_tensor_attention_gpu [B T HEADS HEAD_SIZE]   (exits 77 without a GPU) */
#include <stdio.h>
#include <stdlib.h>
#include <strata/tensor.h>

#include "gpu_gemm.h"

static int step(tensor_ctx_t *c, tensor_t *out, tensor_t *lse, tensor_t *dqkv, const tensor_t *dout,
                const tensor_t *qkv, int NH) {
  int rc = tensor_attention_forward(c, out, lse, qkv, NH);
  if (!rc) rc = tensor_attention_backward(c, dqkv, dout, qkv, out, lse, NH);
  return rc;
}

/* Median seconds of one forward + backward over 5 rounds of `reps`. */
static double time_steps(tensor_ctx_t *c, tensor_t *out, tensor_t *lse, tensor_t *dqkv,
                         const tensor_t *dout, const tensor_t *qkv, int NH, int reps) {
  double t[5];
  if (step(c, out, lse, dqkv, dout, qkv, NH) || tensor_synchronize(c))
    return 0; /* plans, scratch */
  for (int r = 0; r < 5; r++) {
    double t0 = gpu_gemm_now();
    for (int k = 0; k < reps; k++)
      if (step(c, out, lse, dqkv, dout, qkv, NH)) return 0;
    if (tensor_synchronize(c)) return 0;
    t[r] = (gpu_gemm_now() - t0) / reps;
  }
  qsort(t, 5, sizeof *t, gpu_gemm_cmp);
  return t[2];
}

int main(int argc, char **argv) {
  int B = argc > 4 ? atoi(argv[1]) : 8, T = argc > 4 ? atoi(argv[2]) : 1024;
  int NH = argc > 4 ? atoi(argv[3]) : 12, hs = argc > 4 ? atoi(argv[4]) : 64, C = NH * hs;
  if (B <= 0 || T <= 0 || NH <= 0 || hs <= 0) {
    fprintf(stderr, "usage: bench_tensor_attention_gpu [B T HEADS HEAD_SIZE]\n");
    return 2;
  }
  if (tensor_cuda_device_count() == 0) { /* the GPU bundle's convention: 77 = skipped */
    fprintf(stderr, "bench_tensor_attention: no CUDA device (or a build without CUDA): skipped\n");
    return 77;
  }
  tensor_ctx_t *c16 = NULL, *c32 = NULL;
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.bf16_matmul = 1;
  if (tensor_ctx_create(&c16, &o)) return 1;
  o.bf16_matmul = 0;
  if (tensor_ctx_create(&c32, &o)) return 1;
  int64_t sq[3] = {B, T, 3 * C}, so[3] = {B, T, C}, sl[3] = {B, NH, T};
  tensor_t hq = {0}, hd = {0}, qkv = {0}, dqkv = {0}, out = {0}, dout = {0}, lse = {0};
  int rc = 1;
  if (tensor_alloc(c16, &hq, TENSOR_F32, TENSOR_CPU, 3, sq) ||
      tensor_alloc(c16, &hd, TENSOR_F32, TENSOR_CPU, 3, so) ||
      tensor_alloc(c16, &qkv, TENSOR_F32, 0, 3, sq) ||
      tensor_alloc(c16, &dqkv, TENSOR_F32, 0, 3, sq) ||
      tensor_alloc(c16, &out, TENSOR_F32, 0, 3, so) ||
      tensor_alloc(c16, &dout, TENSOR_F32, 0, 3, so) ||
      tensor_alloc(c16, &lse, TENSOR_F32, 0, 3, sl) ||
      tensor_fill_uniform(c16, &hq, 1, "bench.qkv", NULL, -1.f, 1.f) ||
      tensor_fill_uniform(c16, &hd, 2, "bench.dout", NULL, -1.f, 1.f) ||
      tensor_copy(c16, &qkv, &hq) || tensor_copy(c16, &dout, &hd)) {
    fprintf(stderr, "bench_tensor_attention: %s\n", tensor_last_error(c16));
    goto done;
  }
  int v = tensor_cudnn_version();
  double t16 = time_steps(c16, &out, &lse, &dqkv, &dout, &qkv, NH, 10);
  if (t16 == 0) {
    fprintf(stderr, "bench_tensor_attention: %s\n", tensor_last_error(c16));
    goto done;
  }
  double t32 = time_steps(c32, &out, &lse, &dqkv, &dout, &qkv, NH, 2);
  double fwd = 4.0 * B * NH * (double)T * T * hs / 2, flops = 3.5 * fwd;
  double base = gpu_gemm_peak(0);
  if (v)
    fprintf(stderr, "# cuDNN %d.%d.%d on the bf16 context (%s)\n", v / 10000, v / 100 % 100,
            v % 100, getenv("STRATA_ATTENTION") ? getenv("STRATA_ATTENTION") : "default");
  else
    fprintf(stderr, "# cuDNN not loaded: strata's own kernel on both contexts\n");
  fprintf(stderr,
          "# B %d T %d heads %d head size %d: bf16 context %.3f ms, strata's f32 kernel %.3f ms "
          "(%.3g TFLOP/s)\n",
          B, T, NH, hs, t16 * 1e3, t32 * 1e3, t32 > 0 ? flops / t32 / 1e12 : 0);
  printf("BENCH tensor.attention.cuda value=%.4g unit=TFLOP/s baseline=%.4g ratio=%.3f\n",
         flops / t16 / 1e12, base / 1e12, base > 0 ? flops / t16 / base : 0);
  rc = 0;
done:
  tensor_free(c16, &hq), tensor_free(c16, &hd), tensor_free(c16, &qkv), tensor_free(c16, &dqkv);
  tensor_free(c16, &out), tensor_free(c16, &dout), tensor_free(c16, &lse);
  tensor_ctx_destroy(c32);
  tensor_ctx_destroy(c16);
  return rc;
}
