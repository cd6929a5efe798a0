/* CPU vs CUDA equivalence of every libtensor op and of the GPT model. A plain
 * program (no MPI, no Criterion) for GPU machines: `make test-gpu` runs it;
 * exit status 0 = all checks passed. Without a CUDA device it says so and
 * exits 77 (skipped, the GPU bundle's convention).
 *
 * Tolerances:
 * - f32 on both sides: the two backends sum in different orders (cuBLAS
 *   tiles, warp reductions, atomics), so results differ by a few ulps per
 *   accumulated term: |gpu - cpu| <= 1e-5 + 1e-4 |cpu| (about 1000 ulps) for
 *   element-wise and row ops, and for GEMMs 1e-5 relative to sum_k |a b|
 *   (cuBLAS may use TF32 only if asked; we never ask).
 * - bf16 GEMM inputs: each input rounds with relative error <= u = 2^-9, so
 *   each product is off by <= (2u + u^2)|ab| and the dot product by <=
 *   2^-7.9 sum_k |a_k b_k| with f32 accumulation; we check 2^-7 sum |a b|.
 *   Against the CPU GEMM of the already rounded values (bf16 and f16 tensors)
 *   the products are exact in f32 and the f32 bound applies.
 * - exact: casts and 16-bit fills (bitwise, round to nearest even on both
 *   sides), dropout masks (the same Philox counters), embedding forward (a
 *   copy and one add), the model's initialisation.
 * - the model in f32: gradient vectors agree to 1e-3 relative (2-norm); in
 *   bf16 (inputs of every GEMM rounded, ~40 GEMMs deep) to 5e-2, and the loss
 *   to 1e-2 absolute around ln V = 6.2 (an error of 0.2% per GEMM input
 *   compounding through 2 layers, with margin).
 * - 16-bit activations (bf16, f16: par_gpt_options_t.act_dtype and the ops'
 *   16-bit operands): argued before test_act16_rows below, from the rounding of each
 *   stored value (bf16 2^-8 relative, f16 2^-11) on top of the f32 bounds.
 * - a NaN anywhere fails the comparison. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/half.h>
#include <strata/par_gpt.h>
#include <strata/tensor.h>

static tensor_ctx_t *ctx, *ctx16;
static int failures, checks;

#define DEV 0

static tensor_t hrand(int ndim, const int64_t *shape, uint64_t seed, float scale) {
  tensor_t t;
  if (tensor_alloc(ctx, &t, TENSOR_F32, TENSOR_CPU, ndim, shape)) {
    fprintf(stderr, "alloc: %s\n", tensor_last_error(ctx));
    exit(2);
  }
  tensor_fill_uniform(ctx, &t, seed, "gpu_equiv", NULL, -scale, scale);
  return t;
}

static tensor_t todev(const tensor_t *h) {
  tensor_t d;
  if (tensor_alloc(ctx, &d, h->dtype, DEV, h->ndim, h->shape) || tensor_copy(ctx, &d, h)) {
    fprintf(stderr, "device copy: %s\n", tensor_last_error(ctx));
    exit(2);
  }
  return d;
}

static float *fetch(const tensor_t *d) {
  float *p = malloc(tensor_nbytes(d));
  tensor_t h = tensor_view(p, d->dtype, TENSOR_CPU, d->ndim, d->shape);
  if (tensor_copy(ctx, &h, d)) {
    fprintf(stderr, "fetch: %s\n", tensor_last_error(ctx));
    exit(2);
  }
  return p;
}

/* |gpu - cpu| <= atol + rtol |cpu| (+ scale[i] when given). */
static void expect(const char *what, const tensor_t *gpu, const tensor_t *cpu, double atol, double rtol,
                   const double *scale, double srel) {
  float *g = fetch(gpu);
  const float *c = cpu->data;
  double worst = 0;
  int64_t wi = 0, n = tensor_numel(cpu);
  for (int64_t i = 0; i < n; i++) {
    double tol = atol + rtol * fabs(c[i]) + (scale ? srel * scale[i] : 0);
    double d = fabs((double)g[i] - c[i]), e = tol > 0 ? d / tol : (d == 0 ? 0 : INFINITY);
    if (isnan(e)) { /* a NaN on either side fails, and no later element may hide it */
      worst = NAN, wi = i;
      break;
    }
    if (e > worst) worst = e, wi = i;
  }
  checks++;
  if (!(worst <= 1.0)) {
    failures++;
    printf("FAIL %-40s worst %.3g of tolerance at %lld (gpu %g, cpu %g)\n", what, worst, (long long)wi,
           g[wi], c[wi]);
  } else {
    printf("ok   %-40s worst %.3g of tolerance\n", what, worst);
  }
  free(g);
}

static void must(int rc, const char *what) {
  if (rc) {
    printf("FAIL %s: %s\n", what, tensor_last_error(ctx));
    failures++;
  }
}

static void freeall(tensor_t *ts, int n) {
  for (int i = 0; i < n; i++) tensor_free(ctx, &ts[i]);
}

/* sum_k |op(A)_ik op(B)_kj| for the GEMM tolerance. */
static double *abs_products(const tensor_t *a, const tensor_t *b, int ta, int tb, int batch, int M, int N,
                            int K, int shared_b) {
  double *s = calloc((size_t)batch * M * N, sizeof(double));
  const float *A = a->data, *B = b->data;
  for (int z = 0; z < batch; z++)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double acc = 0;
        const float *Az = A + (size_t)z * M * K, *Bz = B + (shared_b ? 0 : (size_t)z * K * N);
        for (int k = 0; k < K; k++)
          acc += fabs((double)(ta ? Az[k * M + i] : Az[i * K + k]) * (tb ? Bz[j * K + k] : Bz[k * N + j]));
        s[((size_t)z * M + i) * N + j] = acc;
      }
  return s;
}

static void test_matmul(void) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int shared = 0; shared < 2; shared++) {
        int Z = 3, M = 37, N = 45, K = 70;
        int64_t sa[3] = {Z, ta ? K : M, ta ? M : K}, sb[3] = {Z, tb ? N : K, tb ? K : N}, sc[3] = {Z, M, N};
        tensor_t t[12];
        t[0] = hrand(3, sa, 1, 1.f), t[1] = shared ? hrand(2, sb + 1, 2, 1.f) : hrand(3, sb, 2, 1.f);
        t[2] = hrand(3, sc, 3, 1.f);
        for (int i = 0; i < 3; i++) t[3 + i] = todev(&t[i]);
        char name[64];
        snprintf(name, sizeof name, "matmul ta%d tb%d shared%d", ta, tb, shared);
        must(tensor_matmul(ctx, &t[2], &t[0], &t[1], ta, tb, 1.f, 0.5f), name);
        must(tensor_matmul(ctx, &t[5], &t[3], &t[4], ta, tb, 1.f, 0.5f), name);
        double *s = abs_products(&t[0], &t[1], ta, tb, Z, M, N, K, shared);
        expect(name, &t[5], &t[2], 1e-6, 1e-6, s, 1e-5);
        /* backward */
        t[6] = hrand(3, sc, 4, 1.f), t[7] = todev(&t[6]);
        t[8] = hrand(t[0].ndim, t[0].shape, 5, 1.f), t[9] = hrand(t[1].ndim, t[1].shape, 6, 1.f);
        t[10] = todev(&t[8]), t[11] = todev(&t[9]);
        must(tensor_matmul_backward(ctx, &t[8], &t[9], &t[6], &t[0], &t[1], ta, tb), name);
        must(tensor_matmul_backward(ctx, &t[10], &t[11], &t[7], &t[3], &t[4], ta, tb), name);
        strcat(name, " backward");
        expect(name, &t[10], &t[8], 1e-4, 1e-4, NULL, 0);
        expect(name, &t[11], &t[9], 1e-4, 1e-4, NULL, 0);
        free(s);
        freeall(t, 12);
      }
  /* 4-D batches (2 x 3), alpha 0.75, a 2-D B shared by all six, and a backward
   * with only dB: the batch dims fold into one strided-batched call. */
  for (int shared = 0; shared < 2; shared++) {
    int M = 19, N = 23, K = 33;
    int64_t sa[4] = {2, 3, K, M}, sb[4] = {2, 3, K, N}, sc[4] = {2, 3, M, N};
    tensor_t t[10];
    t[0] = hrand(4, sa, 101, 1.f), t[1] = shared ? hrand(2, sb + 2, 102, 1.f) : hrand(4, sb, 102, 1.f);
    t[2] = hrand(4, sc, 103, 1.f);
    for (int i = 0; i < 3; i++) t[3 + i] = todev(&t[i]);
    char name[64];
    snprintf(name, sizeof name, "matmul 4-D ta1 tb0 shared%d alpha 0.75", shared);
    must(tensor_matmul(ctx, &t[2], &t[0], &t[1], 1, 0, 0.75f, 0.5f), name);
    must(tensor_matmul(ctx, &t[5], &t[3], &t[4], 1, 0, 0.75f, 0.5f), name);
    double *s = abs_products(&t[0], &t[1], 1, 0, 6, M, N, K, shared);
    expect(name, &t[5], &t[2], 1e-6, 1e-6, s, 1e-5);
    free(s);
    t[6] = hrand(4, sc, 104, 1.f), t[7] = todev(&t[6]);
    t[8] = hrand(t[1].ndim, t[1].shape, 105, 1.f), t[9] = todev(&t[8]);
    must(tensor_matmul_backward(ctx, NULL, &t[8], &t[6], &t[0], &t[1], 1, 0), name);
    must(tensor_matmul_backward(ctx, NULL, &t[9], &t[7], &t[3], &t[4], 1, 0), name);
    strcat(name, " dB only");
    expect(name, &t[9], &t[8], 1e-4, 1e-4, NULL, 0);
    freeall(t, 10);
  }
  /* bf16 tensors on the device: cuBLAS with f32 accumulation. */
  int M = 64, N = 96, K = 256;
  int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
  tensor_t a = hrand(2, sa, 7, 1.f), b = hrand(2, sb, 8, 1.f), c = hrand(2, sc, 9, 1.f);
  tensor_t da = todev(&a), db = todev(&b), dc = todev(&c), a16, b16;
  tensor_alloc(ctx, &a16, TENSOR_BF16, DEV, 2, sa), tensor_alloc(ctx, &b16, TENSOR_BF16, DEV, 2, sb);
  must(tensor_cast(ctx, &a16, &da), "cast a"), must(tensor_cast(ctx, &b16, &db), "cast b");
  must(tensor_matmul(ctx, &c, &a, &b, 0, 0, 1.f, 0.f), "matmul f32");
  must(tensor_matmul(ctx, &dc, &a16, &b16, 0, 0, 1.f, 0.f), "matmul bf16");
  double *s = abs_products(&a, &b, 0, 0, 1, M, N, K, 1);
  expect("matmul bf16 inputs vs f32", &dc, &c, 0, 0, s, 1.0 / 128);
  /* The context option: f32 tensors, bf16 GEMM inputs. */
  tensor_zero(ctx, &dc);
  must(tensor_matmul(ctx16, &dc, &da, &db, 0, 0, 1.f, 0.f), "matmul bf16_matmul");
  expect("matmul bf16_matmul option vs f32", &dc, &c, 0, 0, s, 1.0 / 128);
  free(s);
  tensor_t all[7] = {a, b, c, da, db, dc, a16};
  freeall(all, 7);
  tensor_free(ctx, &b16);
}

static void test_linear_bias_add(void) {
  int64_t si[3] = {4, 33, 48}, sw[2] = {80, 48}, sb[1] = {80}, so[3] = {4, 33, 80};
  tensor_t x = hrand(3, si, 11, 1.f), w = hrand(2, sw, 12, 0.2f), b = hrand(1, sb, 13, 1.f), o = hrand(3, so, 14, 1.f);
  tensor_t dx = todev(&x), dw = todev(&w), dbv = todev(&b), dout = todev(&o);
  must(tensor_linear_forward(ctx, &o, &x, &w, &b), "linear cpu");
  must(tensor_linear_forward(ctx, &dout, &dx, &dw, &dbv), "linear gpu");
  expect("linear forward", &dout, &o, 1e-5, 1e-4, NULL, 0);
  tensor_t g = hrand(3, so, 15, 1.f), gx = hrand(3, si, 16, 1.f), gw = hrand(2, sw, 17, 1.f), gb = hrand(1, sb, 18, 1.f);
  tensor_t dg = todev(&g), dgx = todev(&gx), dgw = todev(&gw), dgb = todev(&gb);
  must(tensor_linear_backward(ctx, &gx, &gw, &gb, &g, &x, &w), "linear backward cpu");
  must(tensor_linear_backward(ctx, &dgx, &dgw, &dgb, &dg, &dx, &dw), "linear backward gpu");
  expect("linear din", &dgx, &gx, 1e-4, 1e-4, NULL, 0);
  expect("linear dweight", &dgw, &gw, 1e-4, 1e-4, NULL, 0);
  expect("linear dbias", &dgb, &gb, 1e-4, 1e-4, NULL, 0);
  must(tensor_bias_add_forward(ctx, &o, &o, &b), "bias cpu");
  must(tensor_bias_add_forward(ctx, &dout, &dout, &dbv), "bias gpu");
  expect("bias add forward", &dout, &o, 1e-5, 1e-4, NULL, 0);
  must(tensor_bias_add_backward(ctx, &g, &gb, &o), "bias bwd cpu");
  must(tensor_bias_add_backward(ctx, &dg, &dgb, &dout), "bias bwd gpu");
  expect("bias add din", &dg, &g, 1e-4, 1e-4, NULL, 0);
  expect("bias add dbias", &dgb, &gb, 1e-4, 1e-4, NULL, 0);
  must(tensor_add_forward(ctx, &g, &o, &g), "add cpu");
  must(tensor_add_forward(ctx, &dg, &dout, &dg), "add gpu");
  expect("residual add forward", &dg, &g, 1e-5, 1e-4, NULL, 0);
  must(tensor_add_backward(ctx, &o, &g, &g), "add bwd cpu");
  must(tensor_add_backward(ctx, &dout, &dg, &dg), "add bwd gpu");
  expect("residual add backward", &dout, &o, 1e-5, 1e-4, NULL, 0);
  tensor_t all[16] = {x, w, b, o, dx, dw, dbv, dout, g, gx, gw, gb, dg, dgx, dgw, dgb};
  freeall(all, 16);
}

static void test_layernorm_gelu(void) {
  int64_t sx[2] = {300, 768}, sw[1] = {768}, sr[1] = {300};
  tensor_t x = hrand(2, sx, 21, 2.f), w = hrand(1, sw, 22, 1.f), b = hrand(1, sw, 23, 1.f), o = hrand(2, sx, 24, 1.f);
  tensor_t mu = hrand(1, sr, 25, 1.f), rs = hrand(1, sr, 26, 1.f);
  tensor_t dx = todev(&x), dw = todev(&w), dbv = todev(&b), dout = todev(&o), dmu = todev(&mu), drs = todev(&rs);
  must(tensor_layernorm_forward(ctx, &o, &mu, &rs, &x, &w, &b, 1e-5f), "ln cpu");
  must(tensor_layernorm_forward(ctx, &dout, &dmu, &drs, &dx, &dw, &dbv, 1e-5f), "ln gpu");
  expect("layernorm forward", &dout, &o, 1e-5, 1e-4, NULL, 0);
  expect("layernorm rstd", &drs, &rs, 1e-5, 1e-4, NULL, 0);
  tensor_t g = hrand(2, sx, 27, 1.f), gx = hrand(2, sx, 28, 1.f), gw = hrand(1, sw, 29, 1.f), gb = hrand(1, sw, 30, 1.f);
  tensor_t dg = todev(&g), dgx = todev(&gx), dgw = todev(&gw), dgb = todev(&gb);
  must(tensor_layernorm_backward(ctx, &gx, &gw, &gb, &g, &x, &w, &mu, &rs), "ln bwd cpu");
  must(tensor_layernorm_backward(ctx, &dgx, &dgw, &dgb, &dg, &dx, &dw, &dmu, &drs), "ln bwd gpu");
  expect("layernorm din", &dgx, &gx, 1e-4, 1e-4, NULL, 0);
  expect("layernorm dweight", &dgw, &gw, 1e-4, 1e-4, NULL, 0);
  expect("layernorm dbias", &dgb, &gb, 1e-4, 1e-4, NULL, 0);
  must(tensor_gelu_forward(ctx, &o, &x), "gelu cpu");
  must(tensor_gelu_forward(ctx, &dout, &dx), "gelu gpu");
  expect("gelu forward", &dout, &o, 1e-5, 1e-4, NULL, 0);
  must(tensor_gelu_backward(ctx, &gx, &g, &x), "gelu bwd cpu");
  must(tensor_gelu_backward(ctx, &dgx, &dg, &dx), "gelu bwd gpu");
  expect("gelu backward", &dgx, &gx, 1e-4, 1e-4, NULL, 0);
  tensor_t all[20] = {x, w, b, o, mu, rs, dx, dw, dbv, dout, dmu, drs, g, gx, gw, gb, dg, dgx, dgw, dgb};
  freeall(all, 20);
}

/* The split layernorm's phases (one rank's 96 of 384 columns; the sums
 * between phases left as the block's own, which the phases accept as any
 * other values) and the transpose. Tolerances as the whole layernorm's:
 * the row sums are in double on both sides (only their last rounding
 * differs), the column sums of dweight and dbias are in float over 300
 * rows in the same order (one thread a column walks the rows as the CPU
 * does), so a few ulps of O(10) values; the transpose is exact. */
static void test_layernorm_split(void) {
  int64_t sx[2] = {300, 96}, sw[1] = {96}, sr[1] = {300}, s2[1] = {600}, C = 384;
  tensor_t x = hrand(2, sx, 81, 2.f), w = hrand(1, sw, 82, 1.f), b = hrand(1, sw, 83, 1.f), o = hrand(2, sx, 84, 1.f);
  tensor_t mu = hrand(1, sr, 85, 1.f), rs = hrand(1, sr, 86, 1.f);
  tensor_t dx = todev(&x), dw = todev(&w), dbv = todev(&b), dout = todev(&o), dmu = todev(&mu), drs = todev(&rs);
  for (int phase = 0; phase < 3; phase++) {
    char what[64];
    must(tensor_layernorm_split_forward(ctx, &o, &mu, &rs, &x, &w, &b, C, 1e-5f, phase), "split ln cpu");
    must(tensor_layernorm_split_forward(ctx, &dout, &dmu, &drs, &dx, &dw, &dbv, C, 1e-5f, phase), "split ln gpu");
    snprintf(what, sizeof what, "split layernorm mean, phase %d", phase);
    expect(what, &dmu, &mu, 1e-5, 1e-5, NULL, 0);
    if (phase > 0) {
      snprintf(what, sizeof what, "split layernorm rstd, phase %d", phase);
      expect(what, &drs, &rs, 1e-5, 1e-5, NULL, 0);
    }
  }
  expect("split layernorm out", &dout, &o, 1e-5, 1e-4, NULL, 0);
  tensor_t g = hrand(2, sx, 87, 1.f), gx = hrand(2, sx, 88, 1.f), gw = hrand(1, sw, 89, 1.f), gb = hrand(1, sw, 90, 1.f);
  tensor_t st = hrand(1, s2, 91, 1.f);
  tensor_t dg = todev(&g), dgx = todev(&gx), dgw = todev(&gw), dgb = todev(&gb), dst = todev(&st);
  must(tensor_layernorm_split_backward(ctx, NULL, &gw, &gb, &st, &g, &x, &w, &mu, &rs, C, 0), "split ln bwd cpu");
  must(tensor_layernorm_split_backward(ctx, NULL, &dgw, &dgb, &dst, &dg, &dx, &dw, &dmu, &drs, C, 0), "split ln bwd gpu");
  expect("split layernorm stats", &dst, &st, 1e-4, 1e-4, NULL, 0);
  expect("split layernorm dweight", &dgw, &gw, 1e-4, 1e-4, NULL, 0);
  expect("split layernorm dbias", &dgb, &gb, 1e-4, 1e-4, NULL, 0);
  must(tensor_layernorm_split_backward(ctx, &gx, NULL, NULL, &st, &g, &x, &w, &mu, &rs, C, 1), "split ln din cpu");
  must(tensor_layernorm_split_backward(ctx, &dgx, NULL, NULL, &st, &dg, &dx, &dw, &dmu, &drs, C, 1), "split ln din gpu");
  /* (the GPU's din from the CPU's stats would differ only by the stats' ulps: both use their own) */
  expect("split layernorm din", &dgx, &gx, 1e-4, 1e-4, NULL, 0);
  int64_t sa[2] = {77, 130}, sb[2] = {130, 77};
  tensor_t a = hrand(2, sa, 92, 1.f), t = hrand(2, sb, 93, 1.f), da = todev(&a), dt = todev(&t);
  must(tensor_transpose(ctx, &t, &a, 1), "transpose cpu");
  must(tensor_transpose(ctx, &dt, &da, 1), "transpose gpu");
  expect("transpose, accumulated", &dt, &t, 0, 0, NULL, 0);
  must(tensor_transpose(ctx, &t, &a, 0), "transpose cpu");
  must(tensor_transpose(ctx, &dt, &da, 0), "transpose gpu");
  expect("transpose", &dt, &t, 0, 0, NULL, 0);
  tensor_t all[26] = {x, w, b, o, mu, rs, dx, dw, dbv, dout, dmu, drs, g, gx, gw, gb, st, dg, dgx, dgw, dgb, dst, a, t,
                      da, dt};
  freeall(all, 26);
}

static void test_attention(int B, int T, int NH, int hs) {
  int C = NH * hs;
  int64_t sq[3] = {B, T, 3 * C}, so[3] = {B, T, C}, sl[3] = {B, NH, T};
  tensor_t q = hrand(3, sq, 31, 1.f), o = hrand(3, so, 32, 1.f), l = hrand(3, sl, 33, 1.f);
  tensor_t dq = todev(&q), dout = todev(&o), dl = todev(&l);
  char name[80];
  snprintf(name, sizeof name, "attention B%d T%d NH%d hs%d", B, T, NH, hs);
  must(tensor_attention_forward(ctx, &o, &l, &q, NH), name);
  must(tensor_attention_forward(ctx, &dout, &dl, &dq, NH), name);
  expect(name, &dout, &o, 1e-5, 1e-4, NULL, 0);
  char lname[96];
  snprintf(lname, sizeof lname, "%s lse", name);
  expect(lname, &dl, &l, 1e-5, 1e-4, NULL, 0);
  tensor_t g = hrand(3, so, 34, 1.f), gq = hrand(3, sq, 35, 1.f), dg = todev(&g), dgq = todev(&gq);
  must(tensor_attention_backward(ctx, &gq, &g, &q, &o, &l, NH), name);
  must(tensor_attention_backward(ctx, &dgq, &dg, &dq, &dout, &dl, NH), name);
  strcat(name, " backward");
  expect(name, &dgq, &gq, 1e-4, 1e-3, NULL, 0);
  tensor_t all[10] = {q, o, l, dq, dout, dl, g, gq, dg, dgq};
  freeall(all, 10);
}

/* Ring self-attention's blockwise attention (attention_block.cu against
 * attention_block.c): one query block at global position q0 = 2 Tk against
 * four key blocks in turn, below, below, on and above its diagonal (the
 * last fully masked: nothing may change), each backend carrying its own
 * running maximum m and sum l from block to block, then the finish (out,
 * lse), the row dot d and each block's backward. Tolerances as for the
 * fused attention above, whose arithmetic this is (f32 dot products of hs
 * terms, sums over at most 3 Tk keys, expf on both sides), only in other
 * orders (32 keys per warp step against OpenBLAS's GEMMs): forward 1e-5 +
 * 1e-4 |cpu|, backward 1e-4 + 1e-3 |cpu| (dS = P (dP - D) cancels). hs 24
 * and 40 leave lanes without a column; Tq != Tk shifts the diagonal. */
static void test_attention_block(int B, int Tq, int Tk, int NH, int hs) {
  int C = NH * hs;
  int64_t sq[3] = {B, Tq, C}, sk[3] = {B, Tk, C}, sr[3] = {B, NH, Tq}, q0 = 2 * (int64_t)Tk;
  char name[96], what[128];
  snprintf(name, sizeof name, "attention block B%d Tq%d Tk%d NH%d hs%d", B, Tq, Tk, NH, hs);
  tensor_t q = hrand(3, sq, 41, 1.f), acc = hrand(3, sq, 42, 1.f), m = hrand(3, sr, 43, 1.f), l = hrand(3, sr, 44, 1.f);
  must(tensor_zero(ctx, &acc), name), must(tensor_fill(ctx, &m, -INFINITY), name), must(tensor_zero(ctx, &l), name);
  tensor_t dq = todev(&q), dacc = todev(&acc), dm = todev(&m), dl = todev(&l);
  tensor_t k[4], v[4], dk[4], dv[4];
  for (int b = 0; b < 4; b++) {
    k[b] = hrand(3, sk, 50 + (uint64_t)b, 1.f), v[b] = hrand(3, sk, 60 + (uint64_t)b, 1.f);
    dk[b] = todev(&k[b]), dv[b] = todev(&v[b]);
    must(tensor_attention_block_forward(ctx, &acc, &m, &l, &q, &k[b], &v[b], NH, q0, (int64_t)b * Tk), name);
    must(tensor_attention_block_forward(ctx, &dacc, &dm, &dl, &dq, &dk[b], &dv[b], NH, q0, (int64_t)b * Tk), name);
  }
  snprintf(what, sizeof what, "%s acc", name), expect(what, &dacc, &acc, 1e-5, 1e-4, NULL, 0);
  snprintf(what, sizeof what, "%s m", name), expect(what, &dm, &m, 1e-5, 1e-4, NULL, 0);
  snprintf(what, sizeof what, "%s l", name), expect(what, &dl, &l, 1e-5, 1e-4, NULL, 0);
  tensor_t out = hrand(3, sq, 45, 1.f), lse = hrand(3, sr, 46, 1.f), dout_ = todev(&out), dlse = todev(&lse);
  must(tensor_attention_block_finish(ctx, &out, &lse, &acc, &m, &l, NH), name);
  must(tensor_attention_block_finish(ctx, &dout_, &dlse, &dacc, &dm, &dl, NH), name);
  snprintf(what, sizeof what, "%s out", name), expect(what, &dout_, &out, 1e-5, 1e-4, NULL, 0);
  snprintf(what, sizeof what, "%s lse", name), expect(what, &dlse, &lse, 1e-5, 1e-4, NULL, 0);
  tensor_t g = hrand(3, sq, 47, 1.f), d = hrand(3, sr, 48, 1.f), dg = todev(&g), dd = todev(&d);
  must(tensor_attention_block_rowdot(ctx, &d, &g, &out, NH), name);
  must(tensor_attention_block_rowdot(ctx, &dd, &dg, &dout_, NH), name);
  snprintf(what, sizeof what, "%s rowdot", name), expect(what, &dd, &d, 1e-5, 1e-4, NULL, 0);
  tensor_t gq = hrand(3, sq, 49, 1.f), dgq = todev(&gq); /* accumulated into: starts nonzero on both */
  for (int b = 0; b < 4; b++) {
    tensor_t gk = hrand(3, sk, 70 + (uint64_t)b, 1.f), gv = hrand(3, sk, 80 + (uint64_t)b, 1.f);
    tensor_t dgk = todev(&gk), dgv = todev(&gv);
    must(tensor_attention_block_backward(ctx, &gq, &gk, &gv, &g, &q, &k[b], &v[b], &lse, &d, NH, q0,
                                         (int64_t)b * Tk), name);
    must(tensor_attention_block_backward(ctx, &dgq, &dgk, &dgv, &dg, &dq, &dk[b], &dv[b], &dlse, &dd, NH, q0,
                                         (int64_t)b * Tk), name);
    snprintf(what, sizeof what, "%s block %d dk", name, b), expect(what, &dgk, &gk, 1e-4, 1e-3, NULL, 0);
    snprintf(what, sizeof what, "%s block %d dv", name, b), expect(what, &dgv, &gv, 1e-4, 1e-3, NULL, 0);
    tensor_t t[4] = {gk, gv, dgk, dgv};
    freeall(t, 4);
  }
  snprintf(what, sizeof what, "%s dq", name), expect(what, &dgq, &gq, 1e-4, 1e-3, NULL, 0);
  for (int b = 0; b < 4; b++) {
    tensor_t t[4] = {k[b], v[b], dk[b], dv[b]};
    freeall(t, 4);
  }
  tensor_t all[18] = {q, acc, m, l, dq, dacc, dm, dl, out, lse, dout_, dlse, g, d, dg, dd, gq, dgq};
  freeall(all, 18);
}

/* tensor_copy_columns (ring attention's q|k|v split and gradient sum):
 * copies are exact, and so is one f32 add on either side. */
static void test_copy_columns(void) {
  int64_t sa[3] = {3, 17, 96}, sb[3] = {3, 17, 40};
  tensor_t a = hrand(3, sa, 91, 1.f), b = hrand(3, sb, 92, 1.f), da = todev(&a), db = todev(&b);
  must(tensor_copy_columns(ctx, &b, 3, &a, 50, 32, 0), "copy columns");
  must(tensor_copy_columns(ctx, &db, 3, &da, 50, 32, 0), "copy columns");
  expect("copy columns", &db, &b, 0, 0, NULL, 0);
  must(tensor_copy_columns(ctx, &a, 10, &b, 1, 37, 1), "add columns");
  must(tensor_copy_columns(ctx, &da, 10, &db, 1, 37, 1), "add columns");
  expect("add columns", &da, &a, 0, 0, NULL, 0);
  tensor_t all[4] = {a, b, da, db};
  freeall(all, 4);
}

/* Decode over a KV cache: the device kernel against the CPU. */
static void test_attention_decode(int B, int len, int Tmax, int NH, int hs) {
  int C = NH * hs;
  int64_t sq[2] = {B, C}, sk[3] = {B, Tmax, C};
  tensor_t q = hrand(2, sq, 51, 1.f), o = hrand(2, sq, 52, 1.f), k = hrand(3, sk, 53, 1.f), v = hrand(3, sk, 54, 1.f);
  tensor_t dq = todev(&q), dout = todev(&o), dk = todev(&k), dv = todev(&v);
  char name[80];
  snprintf(name, sizeof name, "attention decode B%d len%d NH%d hs%d", B, len, NH, hs);
  must(tensor_attention_decode(ctx, &o, &q, &k, &v, len, NH), name);
  must(tensor_attention_decode(ctx, &dout, &dq, &dk, &dv, len, NH), name);
  expect(name, &dout, &o, 1e-5, 1e-4, NULL, 0);
  tensor_t all[8] = {q, o, k, v, dq, dout, dk, dv};
  freeall(all, 8);
}

static void test_embedding_xent_dropout(void) {
  int B = 3, T = 40, C = 64, V = 50304;
  int32_t *ids = malloc(sizeof(int32_t) * B * T);
  for (int i = 0; i < B * T; i++) ids[i] = (i * 7919) % 97; /* repeats */
  int64_t si[2] = {B, T}, se[2] = {V, C}, sp[2] = {T, C}, so[3] = {B, T, C};
  tensor_t hid = tensor_view(ids, TENSOR_I32, TENSOR_CPU, 2, si), did = todev(&hid);
  tensor_t e = hrand(2, se, 41, 1.f), p = hrand(2, sp, 42, 1.f), o = hrand(3, so, 43, 1.f);
  tensor_t de = todev(&e), dp = todev(&p), dout = todev(&o);
  must(tensor_embedding_forward(ctx, &o, &hid, &e, &p), "emb cpu");
  must(tensor_embedding_forward(ctx, &dout, &did, &de, &dp), "emb gpu");
  expect("embedding forward", &dout, &o, 0, 0, NULL, 0); /* a copy and one add: exact */
  must(tensor_embedding_backward(ctx, &e, &p, &o, &hid), "emb bwd cpu");
  must(tensor_embedding_backward(ctx, &de, &dp, &dout, &did), "emb bwd gpu");
  expect("embedding dwte", &de, &e, 1e-5, 1e-5, NULL, 0);
  expect("embedding dwpe", &dp, &p, 1e-5, 1e-5, NULL, 0);
  /* cross-entropy over a GPT-2 vocabulary */
  int64_t sz[2] = {8, V}, sr[1] = {8};
  int32_t tv[8] = {0, 5, 50303, -1, 17, 17, 40000, 3};
  tensor_t ht = tensor_view1(tv, TENSOR_I32, TENSOR_CPU, 8), dt = todev(&ht);
  tensor_t z = hrand(2, sz, 44, 8.f), lo = hrand(1, sr, 45, 1.f), ls = hrand(1, sr, 46, 1.f), gz = hrand(2, sz, 47, 1.f);
  tensor_t dz = todev(&z), dlo = todev(&lo), dls = todev(&ls), dgz = todev(&gz);
  must(tensor_xent_forward(ctx, &lo, &ls, &z, &ht), "xent cpu");
  must(tensor_xent_forward(ctx, &dlo, &dls, &dz, &dt), "xent gpu");
  expect("cross-entropy losses", &dlo, &lo, 1e-5, 1e-5, NULL, 0);
  must(tensor_xent_backward(ctx, &gz, &z, &ls, &ht, 0.125f), "xent bwd cpu");
  must(tensor_xent_backward(ctx, &dgz, &dz, &dls, &dt, 0.125f), "xent bwd gpu");
  expect("cross-entropy dlogits", &dgz, &gz, 1e-6, 1e-4, NULL, 0);
  /* the same logits as the vocabulary slice [20000, 20000 + V) of a larger
   * table: targets inside and outside it (tensor parallelism) */
  tensor_t zt = hrand(1, sr, 48, 1.f), dzt = todev(&zt);
  must(tensor_xent_slice_forward(ctx, &ls, &zt, &z, &ht, 20000), "xent slice cpu");
  must(tensor_xent_slice_forward(ctx, &dls, &dzt, &dz, &dt, 20000), "xent slice gpu");
  expect("cross-entropy slice lse", &dls, &ls, 1e-5, 1e-5, NULL, 0);
  expect("cross-entropy slice target logits", &dzt, &zt, 0, 0, NULL, 0);
  must(tensor_xent_slice_backward(ctx, &gz, &z, &ls, &ht, 0.125f, 20000), "xent slice bwd cpu");
  must(tensor_xent_slice_backward(ctx, &dgz, &dz, &dls, &dt, 0.125f, 20000), "xent slice bwd gpu");
  expect("cross-entropy slice dlogits", &dgz, &gz, 1e-6, 1e-4, NULL, 0);
  /* the embedding table as rows [40, 40 + V) of a vocabulary split over ranks */
  must(tensor_embedding_slice_forward(ctx, &o, &hid, &e, &p, 40), "emb slice cpu");
  must(tensor_embedding_slice_forward(ctx, &dout, &did, &de, &dp, 40), "emb slice gpu");
  expect("embedding slice forward", &dout, &o, 0, 0, NULL, 0);
  must(tensor_embedding_slice_backward(ctx, &e, &p, &o, &hid, 40), "emb slice bwd cpu");
  must(tensor_embedding_slice_backward(ctx, &de, &dp, &dout, &did, 40), "emb slice bwd gpu");
  expect("embedding slice dwte", &de, &e, 1e-5, 1e-5, NULL, 0);
  /* the slices of a group of 4 combined (vocabulary-parallel cross-entropy):
   * the same float maximum and double sum on both sides, exp and log of
   * libm and of CUDA within an ulp of double: equal to 1e-6 */
  int64_t sp4[2] = {4, 8};
  tensor_t parts = hrand(2, sp4, 49, 8.f), dparts = todev(&parts), lz = hrand(1, sr, 50, 4.f), dlz = todev(&lz);
  must(tensor_xent_slice_combine(ctx, &ls, &lz, &parts, &lz, &ht), "xent combine cpu");
  must(tensor_xent_slice_combine(ctx, &dls, &dlz, &dparts, &dlz, &dt), "xent combine gpu");
  expect("cross-entropy slices combined: lse", &dls, &ls, 1e-6, 1e-6, NULL, 0);
  expect("cross-entropy slices combined: losses", &dlz, &lz, 1e-6, 1e-6, NULL, 0);
  tensor_free(ctx, &parts), tensor_free(ctx, &dparts), tensor_free(ctx, &lz), tensor_free(ctx, &dlz);
  tensor_free(ctx, &zt), tensor_free(ctx, &dzt);
  /* dropout masks come from the same Philox: exactly equal */
  must(tensor_dropout_forward(ctx, &z, &z, 0.1f, 3, "drop", 77), "dropout cpu");
  must(tensor_dropout_forward(ctx, &dz, &dz, 0.1f, 3, "drop", 77), "dropout gpu");
  expect("dropout forward", &dz, &z, 0, 0, NULL, 0);
  must(tensor_dropout_backward(ctx, &gz, &z, 0.1f, 3, "drop", 77), "dropout bwd cpu");
  must(tensor_dropout_backward(ctx, &dgz, &dz, 0.1f, 3, "drop", 77), "dropout bwd gpu");
  expect("dropout backward", &dgz, &gz, 1e-6, 1e-6, NULL, 0);
  /* fills by global index and casts: bitwise */
  must(tensor_fill_normal(ctx, &e, 9, "wte", NULL, 0.f, 0.02f), "fill cpu");
  must(tensor_fill_normal(ctx, &de, 9, "wte", NULL, 0.f, 0.02f), "fill gpu");
  expect("fill_normal", &de, &e, 0, 0, NULL, 0);
  tensor_t h16, d16, back, dback;
  tensor_alloc(ctx, &h16, TENSOR_BF16, TENSOR_CPU, 2, sz), tensor_alloc(ctx, &d16, TENSOR_BF16, DEV, 2, sz);
  tensor_alloc(ctx, &back, TENSOR_F32, TENSOR_CPU, 2, sz), tensor_alloc(ctx, &dback, TENSOR_F32, DEV, 2, sz);
  must(tensor_cast(ctx, &h16, &z), "cast cpu"), must(tensor_cast(ctx, &d16, &dz), "cast gpu");
  must(tensor_cast(ctx, &back, &h16), "cast back cpu"), must(tensor_cast(ctx, &dback, &d16), "cast back gpu");
  expect("cast f32 -> bf16 -> f32", &dback, &back, 0, 0, NULL, 0);
  tensor_t all[20] = {did, e, p, o, de, dp, dout, dt, z, lo, ls, gz, dz, dlo, dls, dgz, h16, d16, back, dback};
  freeall(all, 20);
  free(ids);
}

/* Host copy of `src` rounded to dtype and widened back to f32 (exact), with the
 * 16-bit tensor on the device. */
static tensor_t rounded(const tensor_t *src, tensor_dtype_t dt, tensor_t *dev16) {
  tensor_t h16, r;
  if (tensor_alloc(ctx, &h16, dt, TENSOR_CPU, src->ndim, src->shape) ||
      tensor_alloc(ctx, &r, TENSOR_F32, TENSOR_CPU, src->ndim, src->shape) || tensor_cast(ctx, &h16, src) ||
      tensor_cast(ctx, &r, &h16)) {
    fprintf(stderr, "rounding: %s\n", tensor_last_error(ctx));
    exit(2);
  }
  *dev16 = todev(&h16);
  tensor_free(ctx, &h16);
  return r;
}

/* 16-bit GEMM inputs on the device against the f32 CPU GEMM of the same
 * rounded values: 16-bit products are exact in f32, so only the summation
 * order differs and the f32 bound holds (1e-5 sum_k |a b|, as above). This
 * checks that cuBLAS reads the bf16/f16 data with the right layout, not just
 * that the result is near. */
static void test_16bit_gemms(void) {
  for (int dt = TENSOR_BF16; dt <= TENSOR_F16; dt++) {
    const char *dn = dt == TENSOR_BF16 ? "bf16" : "f16";
    char name[80];
    /* linear: (4,33,48) x (80,48)^T + bias */
    int64_t si[3] = {4, 33, 48}, sw[2] = {80, 48}, sb[1] = {80}, so[3] = {4, 33, 80};
    tensor_t x = hrand(3, si, 111, 1.f), w = hrand(2, sw, 112, 0.5f), b = hrand(1, sb, 113, 1.f);
    tensor_t o = hrand(3, so, 114, 1.f), x16, w16;
    tensor_t xr = rounded(&x, dt, &x16), wr = rounded(&w, dt, &w16), db = todev(&b), dout = todev(&o);
    must(tensor_linear_forward(ctx, &o, &xr, &wr, &b), "linear 16-bit cpu");
    must(tensor_linear_forward(ctx, &dout, &x16, &w16, &db), "linear 16-bit gpu");
    int64_t s2[2] = {4 * 33, 48};
    tensor_t x2 = tensor_view(xr.data, TENSOR_F32, TENSOR_CPU, 2, s2);
    double *s = abs_products(&x2, &wr, 0, 1, 1, 4 * 33, 80, 48, 1);
    snprintf(name, sizeof name, "linear forward, %s in and weight", dn);
    expect(name, &dout, &o, 1e-6, 1e-6, s, 1e-5);
    free(s);
    tensor_t all[9] = {x, w, b, o, x16, w16, xr, wr, db};
    freeall(all, 9);
    tensor_free(ctx, &dout);
    /* batched matmul, both operands transposed, B shared: (3, K, M)^T x (N, K)^T */
    int Z = 3, M = 21, N = 34, K = 40;
    int64_t sa[3] = {Z, K, M}, sbb[2] = {N, K}, sc[3] = {Z, M, N};
    tensor_t a = hrand(3, sa, 115, 1.f), bb = hrand(2, sbb, 116, 1.f), c = hrand(3, sc, 117, 1.f), a16, b16;
    tensor_t ar = rounded(&a, dt, &a16), br = rounded(&bb, dt, &b16), dc = todev(&c);
    must(tensor_matmul(ctx, &c, &ar, &br, 1, 1, 1.f, 0.5f), "matmul 16-bit cpu");
    must(tensor_matmul(ctx, &dc, &a16, &b16, 1, 1, 1.f, 0.5f), "matmul 16-bit gpu");
    s = abs_products(&ar, &br, 1, 1, Z, M, N, K, 1);
    snprintf(name, sizeof name, "matmul ta1 tb1 shared, %s inputs", dn);
    expect(name, &dc, &c, 1e-6, 1e-6, s, 1e-5);
    free(s);
    tensor_t all2[7] = {a, bb, c, a16, b16, ar, br};
    freeall(all2, 7);
    tensor_free(ctx, &dc);
  }
}

/* Bitwise equality of a device tensor with host bytes. */
static void expect_bits(const char *what, const tensor_t *gpu, const void *cpu) {
  unsigned char *g = (unsigned char *)fetch(gpu);
  const unsigned char *c = cpu;
  size_t es = tensor_dtype_size(gpu->dtype), n = (size_t)tensor_numel(gpu), bad = n;
  for (size_t i = 0; i < n && bad == n; i++)
    if (memcmp(g + i * es, c + i * es, es)) bad = i;
  checks++;
  if (bad < n) {
    uint32_t gv = 0, cv = 0;
    memcpy(&gv, g + bad * es, es), memcpy(&cv, c + bad * es, es);
    failures++;
    printf("FAIL %-40s element %zu: gpu 0x%0*x, cpu 0x%0*x\n", what, bad, (int)es * 2, gv, (int)es * 2, cv);
  } else {
    printf("ok   %-40s bitwise equal (%zu elements)\n", what, n);
  }
  free(g);
}

/* Casts round to nearest even on both sides (strata/half.h on the CPU, the
 * CUDA intrinsics on the device), so the bits must agree exactly: random
 * values plus the cases where rounding decides - exact ties with even and odd
 * neighbours, one ulp either side of a tie, f16 subnormals and their ties,
 * the carry from the largest f16 subnormal into the smallest normal, the f16
 * overflow threshold 65520 and the bf16 one, infinities and signed zeros.
 * (NaN payloads are left out: both give a quiet NaN, not the same bits.) */
static void test_casts(void) {
  static const uint32_t special[] = {
      0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0xbf818000u, 0xbf808000u, /* bf16 ties */
      0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0xff7f8000u, 0x7f800000u, 0xff800000u, /* bf16 top */
      0x00000000u, 0x80000000u, 0x00000001u, 0x00018000u, 0x00008000u, 0x807fffffu, /* f32 subnormals */
      0x3f801000u, 0x3f803000u, 0x3f801001u, 0x3f800fffu, 0xbf803000u,              /* f16 ties */
      0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u, 0xc77ff000u, 0x47800000u, /* f16 top */
      0x33800000u, 0x33000000u, 0x33000001u, 0x32ffffffu, 0x33400000u, 0x33a00000u, /* f16 subnormals */
      0x387fc000u, 0x387fffffu, 0x38800000u, 0x387fe000u, 0xb87fc000u, 0x37800000u,
  };
  enum { NS = sizeof special / sizeof special[0], NR = 4096, N = NS + NR };
  int64_t shape[1] = {N};
  tensor_t h = hrand(1, shape, 121, 3.f);
  float *v = h.data;
  for (int i = 0; i < NS; i++) memcpy(&v[i], &special[i], 4);
  for (int i = NS; i < N; i += 2) v[i] = ldexpf(v[i], i % 41 - 26); /* f16 subnormals .. overflow */
  tensor_t d = todev(&h);
  tensor_dtype_t dts[3] = {TENSOR_F32, TENSOR_BF16, TENSOR_F16};
  const char *names[3] = {"f32", "bf16", "f16"};
  tensor_t hs[3], ds[3];
  for (int k = 1; k < 3; k++) { /* f32 -> 16-bit */
    tensor_alloc(ctx, &hs[k], dts[k], TENSOR_CPU, 1, shape), tensor_alloc(ctx, &ds[k], dts[k], DEV, 1, shape);
    must(tensor_cast(ctx, &hs[k], &h), "cast cpu"), must(tensor_cast(ctx, &ds[k], &d), "cast gpu");
    char name[64];
    snprintf(name, sizeof name, "cast f32 -> %s", names[k]);
    expect_bits(name, &ds[k], hs[k].data);
  }
  for (int from = 1; from < 3; from++) /* 16-bit -> f32 and across: start from the CPU's bits on both sides */
    for (int to = 0; to < 3; to++) {
      if (to == from) continue;
      tensor_t src = todev(&hs[from]), hd, dd;
      tensor_alloc(ctx, &hd, dts[to], TENSOR_CPU, 1, shape), tensor_alloc(ctx, &dd, dts[to], DEV, 1, shape);
      must(tensor_cast(ctx, &hd, &hs[from]), "cast cpu"), must(tensor_cast(ctx, &dd, &src), "cast gpu");
      char name[64];
      snprintf(name, sizeof name, "cast %s -> %s", names[from], names[to]);
      expect_bits(name, &dd, hd.data);
      tensor_t all[3] = {src, hd, dd};
      freeall(all, 3);
    }
  /* fill of 16-bit device tensors rounds the same way */
  for (int k = 1; k < 3; k++) {
    must(tensor_fill(ctx, &hs[k], 1.00390625f), "fill cpu"), must(tensor_fill(ctx, &ds[k], 1.00390625f), "fill gpu");
    char name[64];
    snprintf(name, sizeof name, "fill %s (a tie)", names[k]);
    expect_bits(name, &ds[k], hs[k].data);
    tensor_free(ctx, &hs[k]), tensor_free(ctx, &ds[k]);
  }
  tensor_free(ctx, &h), tensor_free(ctx, &d);
}

/* Small and ragged shapes: rows not a multiple of a block's 8 warps, C and V
 * not multiples of 32 or of the 512 threads of a cross-entropy row, optional
 * operands left out (no layernorm bias, no dbias, no wpe, no dwte). */
static void test_ragged(void) {
  int64_t sx[3] = {1, 13, 50}, sw[1] = {50}, sr[2] = {1, 13};
  tensor_t x = hrand(3, sx, 131, 2.f), w = hrand(1, sw, 132, 1.f), o = hrand(3, sx, 133, 1.f);
  tensor_t mu = hrand(2, sr, 134, 1.f), rs = hrand(2, sr, 135, 1.f);
  tensor_t dx = todev(&x), dw = todev(&w), dout = todev(&o), dmu = todev(&mu), drs = todev(&rs);
  must(tensor_layernorm_forward(ctx, &o, &mu, &rs, &x, &w, NULL, 1e-5f), "ln cpu");
  must(tensor_layernorm_forward(ctx, &dout, &dmu, &drs, &dx, &dw, NULL, 1e-5f), "ln gpu");
  expect("layernorm C50, no bias", &dout, &o, 1e-5, 1e-4, NULL, 0);
  expect("layernorm C50 mean", &dmu, &mu, 1e-5, 1e-4, NULL, 0);
  tensor_t g = hrand(3, sx, 136, 1.f), gx = hrand(3, sx, 137, 1.f), gw = hrand(1, sw, 138, 1.f);
  tensor_t dg = todev(&g), dgx = todev(&gx), dgw = todev(&gw);
  must(tensor_layernorm_backward(ctx, &gx, &gw, NULL, &g, &x, &w, &mu, &rs), "ln bwd cpu");
  must(tensor_layernorm_backward(ctx, &dgx, &dgw, NULL, &dg, &dx, &dw, &dmu, &drs), "ln bwd gpu");
  expect("layernorm C50 din", &dgx, &gx, 1e-4, 1e-4, NULL, 0);
  expect("layernorm C50 dweight (no dbias)", &dgw, &gw, 1e-4, 1e-4, NULL, 0);
  tensor_t all[13] = {x, w, o, mu, rs, dx, dw, dout, dmu, drs, g, gx, gw};
  freeall(all, 13);
  tensor_t all2[3] = {dg, dgx, dgw};
  freeall(all2, 3);
  /* embedding without positions; backward into dwpe only */
  int B = 2, T = 7, C = 40, V = 300;
  int32_t ids[14];
  for (int i = 0; i < B * T; i++) ids[i] = (i * 37 + 5) % V;
  int64_t si[2] = {B, T}, se[2] = {V, C}, sp[2] = {T + 3, C}, so[3] = {B, T, C};
  tensor_t hid = tensor_view(ids, TENSOR_I32, TENSOR_CPU, 2, si), did = todev(&hid);
  tensor_t e = hrand(2, se, 141, 1.f), p = hrand(2, sp, 142, 1.f), eo = hrand(3, so, 143, 1.f);
  tensor_t de = todev(&e), dp = todev(&p), deo = todev(&eo);
  must(tensor_embedding_forward(ctx, &eo, &hid, &e, NULL), "emb cpu");
  must(tensor_embedding_forward(ctx, &deo, &did, &de, NULL), "emb gpu");
  expect("embedding forward, no wpe", &deo, &eo, 0, 0, NULL, 0);
  must(tensor_embedding_backward(ctx, NULL, &p, &eo, &hid), "emb bwd cpu");
  must(tensor_embedding_backward(ctx, NULL, &dp, &deo, &did), "emb bwd gpu");
  expect("embedding dwpe (wpe longer than T)", &dp, &p, 1e-5, 1e-5, NULL, 0);
  tensor_t all3[7] = {did, e, p, eo, de, dp, deo};
  freeall(all3, 7);
  /* cross-entropy with V = 100 < 512 threads, 3-D logits */
  int64_t sz[3] = {2, 5, 100}, st[2] = {2, 5};
  int32_t tv[10] = {0, 99, -1, 50, 7, 7, 98, 1, -5, 33};
  tensor_t ht = tensor_view(tv, TENSOR_I32, TENSOR_CPU, 2, st), dt = todev(&ht);
  tensor_t z = hrand(3, sz, 144, 4.f), lo = hrand(2, st, 145, 1.f), ls = hrand(2, st, 146, 1.f);
  tensor_t gz = hrand(3, sz, 147, 1.f);
  tensor_t dz = todev(&z), dlo = todev(&lo), dls = todev(&ls), dgz = todev(&gz);
  must(tensor_xent_forward(ctx, &lo, &ls, &z, &ht), "xent cpu");
  must(tensor_xent_forward(ctx, &dlo, &dls, &dz, &dt), "xent gpu");
  expect("cross-entropy V100 losses", &dlo, &lo, 1e-5, 1e-5, NULL, 0);
  expect("cross-entropy V100 lse", &dls, &ls, 1e-5, 1e-5, NULL, 0);
  must(tensor_xent_backward(ctx, &gz, &z, &ls, &ht, 0.1f), "xent bwd cpu");
  must(tensor_xent_backward(ctx, &dgz, &dz, &dls, &dt, 0.1f), "xent bwd gpu");
  expect("cross-entropy V100 dlogits", &dgz, &gz, 1e-6, 1e-4, NULL, 0);
  /* dropout at an element offset past 2^32 (the counter's high word) */
  must(tensor_dropout_forward(ctx, &z, &z, 0.5f, 11, "drop.hi", 5000000000LL), "dropout cpu");
  must(tensor_dropout_forward(ctx, &dz, &dz, 0.5f, 11, "drop.hi", 5000000000LL), "dropout gpu");
  expect("dropout forward, offset 5e9", &dz, &z, 0, 0, NULL, 0);
  tensor_t all4[9] = {dt, z, lo, ls, gz, dz, dlo, dls, dgz};
  freeall(all4, 9);
}

static void expect_rc(const char *what, int got, int want) {
  checks++;
  if (got != want) {
    failures++;
    printf("FAIL %-40s status %d, expected %d (%s)\n", what, got, want, tensor_last_error(ctx));
  } else {
    printf("ok   %-40s %s\n", what, tensor_last_error(ctx));
  }
}

/* Bad input found on the device still gives a status and a message. */
static void test_errors(void) {
  int32_t ids[4] = {0, 1, 7, 2}; /* 7 >= V */
  int64_t si[2] = {1, 4}, se[2] = {5, 8}, so[3] = {1, 4, 8};
  tensor_t hid = tensor_view(ids, TENSOR_I32, TENSOR_CPU, 2, si), did = todev(&hid);
  tensor_t e = hrand(2, se, 151, 1.f), o = hrand(3, so, 152, 1.f), de = todev(&e), dout = todev(&o);
  expect_rc("embedding id out of range on the device", tensor_embedding_forward(ctx, &dout, &did, &de, NULL),
            STRATA_EINVAL);
  expect_rc("operands on cpu and cuda", tensor_embedding_forward(ctx, &dout, &did, &e, NULL), STRATA_ESHAPE);
  int64_t sz[2] = {4, 5}, sr[1] = {4};
  tensor_t z = hrand(2, sz, 153, 1.f), l = hrand(1, sr, 154, 1.f), dz = todev(&z), dl = todev(&l), dl2 = todev(&l);
  int32_t tv[4] = {0, 4, 5, -1}; /* 5 >= V */
  tensor_t ht = tensor_view1(tv, TENSOR_I32, TENSOR_CPU, 4), dt = todev(&ht);
  expect_rc("cross-entropy target >= V on the device", tensor_xent_forward(ctx, &dl, &dl2, &dz, &dt),
            STRATA_EINVAL);
  expect_rc("cross-entropy backward target >= V", tensor_xent_backward(ctx, &dz, &dz, &dl2, &dt, 1.f),
            STRATA_EINVAL);
  /* head size 1024: the tiles need more shared memory than a block may have */
  int64_t sq[3] = {1, 4, 3 * 1024}, sa[3] = {1, 4, 1024}, sl[3] = {1, 1, 4};
  tensor_t q = hrand(3, sq, 155, 1.f), dq = todev(&q), ao = hrand(3, sa, 156, 1.f), dao = todev(&ao);
  tensor_t al = hrand(3, sl, 157, 1.f), dal = todev(&al);
  expect_rc("attention head size 1024", tensor_attention_forward(ctx, &dao, &dal, &dq, 1), STRATA_EUNSUPPORTED);
  tensor_t all[16] = {did, e, o, de, dout, z, l, dz, dl, dl2, dt, q, dq, ao, dao, al};
  freeall(all, 16);
  tensor_free(ctx, &dal);
}

static double rel_diff(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
  return sqrt(num / (den > 0 ? den : 1));
}

/* The fused residual add + layernorm: against the CPU's separate ops with
 * the layernorm's tolerance, and against the device's own separate kernels
 * bit for bit (the fused kernel sums in their order). */
static void test_residual_layernorm(void) {
  int64_t sx[2] = {300, 768}, sw[1] = {768}, sr[1] = {300};
  tensor_t a = hrand(2, sx, 41, 2.f), b = hrand(2, sx, 42, 2.f), w = hrand(1, sw, 43, 1.f), bi = hrand(1, sw, 44, 1.f);
  tensor_t r = hrand(2, sx, 45, 1.f), o = hrand(2, sx, 46, 1.f), mu = hrand(1, sr, 47, 1.f), rs = hrand(1, sr, 48, 1.f);
  tensor_t da = todev(&a), db = todev(&b), dw = todev(&w), dbi = todev(&bi), dr = todev(&r), dout = todev(&o),
           dmu = todev(&mu), drs = todev(&rs), dr2 = todev(&r), do2 = todev(&o), dmu2 = todev(&mu), drs2 = todev(&rs);
  must(tensor_residual_layernorm_forward(ctx, &r, &o, &mu, &rs, &a, &b, &w, &bi, 1e-5f), "res ln cpu");
  must(tensor_residual_layernorm_forward(ctx, &dr, &dout, &dmu, &drs, &da, &db, &dw, &dbi, 1e-5f), "res ln gpu");
  expect("residual layernorm sum", &dr, &r, 0, 0, NULL, 0); /* one f32 add: exact on both */
  expect("residual layernorm forward", &dout, &o, 1e-5, 1e-4, NULL, 0);
  expect("residual layernorm mean", &dmu, &mu, 1e-5, 1e-4, NULL, 0);
  expect("residual layernorm rstd", &drs, &rs, 1e-5, 1e-4, NULL, 0);
  must(tensor_add_forward(ctx, &dr2, &da, &db), "add gpu");
  must(tensor_layernorm_forward(ctx, &do2, &dmu2, &drs2, &dr2, &dw, &dbi, 1e-5f), "ln gpu");
  float *f1 = fetch(&dout), *f2 = fetch(&do2), *q1 = fetch(&drs), *q2 = fetch(&drs2);
  checks++;
  if (memcmp(f1, f2, tensor_nbytes(&o)) || memcmp(q1, q2, tensor_nbytes(&rs)))
    failures++, printf("FAIL residual layernorm: not the device's separate kernels bit for bit\n");
  else
    printf("ok   residual layernorm is the device's add + layernorm bit for bit\n");
  free(f1), free(f2), free(q1), free(q2);
  tensor_t g = hrand(2, sx, 49, 1.f), gx = hrand(2, sx, 50, 1.f), gw = hrand(1, sw, 51, 1.f), gb = hrand(1, sw, 52, 1.f);
  tensor_t dg = todev(&g), dgx = todev(&gx), dgw = todev(&gw), dgb = todev(&gb);
  must(tensor_residual_layernorm_backward(ctx, &gx, &gw, &gb, &g, &r, &w, &mu, &rs), "res ln bwd cpu");
  must(tensor_residual_layernorm_backward(ctx, &dgx, &dgw, &dgb, &dg, &dr, &dw, &dmu, &drs), "res ln bwd gpu");
  expect("residual layernorm dresid", &dgx, &gx, 1e-4, 1e-4, NULL, 0);
  expect("residual layernorm dweight", &dgw, &gw, 1e-4, 1e-4, NULL, 0);
  expect("residual layernorm dbias", &dgb, &gb, 1e-4, 1e-4, NULL, 0);
  tensor_t all[] = {a, b, w, bi, r, o, mu, rs, da, db, dw, dbi, dr, dout, dmu, drs, dr2, do2, dmu2, drs2,
                    g, gx, gw, gb, dg, dgx, dgw, dgb};
  freeall(all, (int)(sizeof all / sizeof *all));
}

/* The fused classifier's tolerances, from the CPU's h (R x C), weight
 * (V x C), logits Z, log-sum-exps LS and targets T (< 0: ignored): S[r] the
 * largest sum_c |h w| of row r's logits (smax the largest over rows), tl
 * and tl2 the lse's and the loss's bounds e S and 2 e S, sdh and sdw the
 * sums |dlogits| |w| and |dlogits| |h| behind dh and dweight (dlogits'
 * magnitude bounded by dloss (p + [v = target])). The caller frees all five. */
static void classifier_bounds(const float *H, const float *W, const float *Z, const float *LS, const int32_t *T,
                              int R, int V, int C, double dloss, double e, double **Sp, double *smaxp, double **tlp,
                              double **tl2p, double **sdhp, double **sdwp) {
  double *S = calloc(R, sizeof(double)), smax = 0;
  for (int r = 0; r < R; r++) {
    for (int v = 0; v < V; v++) {
      double a = 0;
      for (int c = 0; c < C; c++) a += fabs((double)H[r * C + c] * W[v * C + c]);
      S[r] = a > S[r] ? a : S[r];
    }
    smax = S[r] > smax ? S[r] : smax;
  }
  double *tl = calloc(R, sizeof(double)), *tl2 = calloc(R, sizeof(double));
  for (int r = 0; r < R; r++) tl[r] = e * S[r], tl2[r] = 2 * e * S[r];
  double *sdh = calloc((size_t)R * C, sizeof(double)), *sdw = calloc((size_t)V * C, sizeof(double));
  for (int r = 0; r < R; r++) {
    if (T[r] < 0) continue;
    for (int v = 0; v < V; v++) {
      double p = exp((double)Z[r * V + v] - LS[r]) + (v == T[r]);
      for (int c = 0; c < C; c++) {
        sdh[r * C + c] += dloss * p * fabs(W[v * C + c]);
        sdw[v * C + c] += dloss * p * fabs(H[r * C + c]);
      }
    }
  }
  *Sp = S, *smaxp = smax, *tlp = tl, *tl2p = tl2, *sdhp = sdh, *sdwp = sdw;
}

/* The fused classifier (h (R, C), W (V, C)) against its CPU path (the
 * separate ops), chunk sizes that do and do not divide the rows, some
 * targets ignored. Tolerances, per row r and from the logits' error dz_r:
 * - f32: cuBLAS and OpenBLAS sum the C products in different orders:
 *   |dz| <= e S_r with e = 1e-5 (as for the GEMMs above) and S_r =
 *   max_v sum_c |h_rc w_vc|; bf16_matmul: h and W rounded with relative
 *   error u = 2^-9 each, so |dz| <= (2u + u^2) S_r < 2^-7.9 S_r: e = 2^-7.
 * - lse moves by at most max |dz| (it is 1-Lipschitz in the max norm) and
 *   the loss lse - z_t by twice that; plus the row reduction's reordering,
 *   1e-5 relative.
 * - dlogits = dloss (p - onehot): exp(dz - dlse) moves p by a factor within
 *   e^(+-2 e S_r), ~ 2 e S_r relative; bf16 also rounds dlogits, W and h
 *   for the backward GEMMs (u each), and both sum in another order (1e-5).
 *   So each product of dh_rc = sum_v dz_rv w_vc and dW_vc = sum_r dz_rv
 *   h_rc is off by (2 e S + k) of its magnitude, k = 1e-5 (f32) or 3u
 *   (bf16), and the check is per element against dloss sum |p +
 *   onehot| |w| (resp. |h|) times (2 e S_max + k). */
static void test_classifier(int bf16, int chunk) {
  enum { R = 300, C = 96, V = 1000 };
  tensor_ctx_t *cx = bf16 ? ctx16 : ctx;
  int64_t sh[2] = {R, C}, sw[2] = {V, C}, sr[1] = {R}, sz[2] = {R, V};
  tensor_t h = hrand(2, sh, 61, 1.f), w = hrand(2, sw, 62, 0.1f), l = hrand(1, sr, 63, 1.f), ls = hrand(1, sr, 64, 1.f);
  tensor_t dh = hrand(2, sh, 65, 0.01f), dw = hrand(2, sw, 66, 0.01f), z = hrand(2, sz, 67, 1.f), tg;
  tensor_alloc(ctx, &tg, TENSOR_I32, TENSOR_CPU, 1, sr);
  for (int r = 0; r < R; r++) ((int32_t *)tg.data)[r] = r % 11 == 5 ? -1 : (r * 37 + 11) % V;
  tensor_t gh = todev(&h), gw = todev(&w), gl = todev(&l), gls = todev(&ls), gdh = todev(&dh), gdw = todev(&dw),
           gtg = todev(&tg);
  float dloss = 1.f / 270;
  must(tensor_classifier_xent(ctx, &l, &ls, &dh, &dw, &h, &w, &tg, dloss, chunk), "classifier cpu");
  must(tensor_classifier_xent(cx, &gl, &gls, &gdh, &gdw, &gh, &gw, &gtg, dloss, chunk), "classifier gpu");
  must(tensor_linear_forward(ctx, &z, &h, &w, NULL), "logits cpu"); /* for the tolerances */
  const float *H = h.data, *W = w.data, *Z = z.data, *LS = ls.data;
  const int32_t *T = tg.data;
  double e = bf16 ? 1.0 / 128 : 1e-5, k = bf16 ? 3.0 / 512 : 1e-5, *S, smax, *tl, *tl2, *sdh, *sdw;
  classifier_bounds(H, W, Z, LS, T, R, V, C, dloss, e, &S, &smax, &tl, &tl2, &sdh, &sdw);
  char what[96];
  const char *mode = bf16 ? "bf16" : "f32";
  snprintf(what, sizeof what, "classifier lse (%s, chunk %d)", mode, chunk);
  expect(what, &gls, &ls, 0, 1e-5, tl, 1.0);
  snprintf(what, sizeof what, "classifier losses (%s, chunk %d)", mode, chunk);
  expect(what, &gl, &l, 0, 1e-5, tl2, 1.0);
  snprintf(what, sizeof what, "classifier dh (%s, chunk %d)", mode, chunk);
  expect(what, &gdh, &dh, 1e-7, 0, sdh, 2 * e * smax + k);
  snprintf(what, sizeof what, "classifier dweight (%s, chunk %d)", mode, chunk);
  expect(what, &gdw, &dw, 1e-7, 0, sdw, 2 * e * smax + k);
  /* forward only: the same lse; a target >= V is an error */
  must(tensor_classifier_xent(cx, &gl, &gls, NULL, NULL, &gh, &gw, &gtg, 0.f, chunk), "classifier gpu forward");
  snprintf(what, sizeof what, "classifier forward-only lse (%s, chunk %d)", mode, chunk);
  expect(what, &gls, &ls, 0, 1e-5, tl, 1.0);
  ((int32_t *)tg.data)[7] = V;
  tensor_copy(ctx, &gtg, &tg);
  checks++;
  if (tensor_classifier_xent(cx, &gl, &gls, NULL, NULL, &gh, &gw, &gtg, 0.f, chunk) != STRATA_EINVAL)
    failures++, printf("FAIL classifier: a target >= V not reported\n");
  else
    printf("ok   classifier target >= V: %s\n", tensor_last_error(cx));
  free(S), free(tl), free(tl2), free(sdh), free(sdw);
  tensor_t all[] = {h, w, l, ls, dh, dw, z, tg, gh, gw, gl, gls, gdh, gdw, gtg};
  freeall(all, (int)(sizeof all / sizeof *all));
}

/* The GPT model on the device (the fused classifier head, with
 * libtensor's default chunk or head_chunk rows, and the fused residual
 * layernorm) against the CPU model (the separate ops). */
static void test_model(int bf16, int recompute, int head_chunk) {
  par_gpt_config_t c = {.layers = 2, .hidden = 128, .heads = 4, .seq = 64, .vocab = 512, .recompute = recompute};
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  par_gpt_t *cpu = NULL, *gpu = NULL;
  o.device = DEV;
  o.bf16_matmul = bf16;
  o.head_chunk = head_chunk;
  if (par_gpt_create(&cpu, &c, 5) || par_gpt_create_ex(&gpu, &c, &o, 5)) {
    printf("FAIL model create: %s\n", par_gpt_create_error());
    failures++;
    goto done;
  }
  int B = 4, T = 64;
  int32_t tok[256], tgt[256];
  for (int i = 0; i < B * T; i++) tok[i] = (i * 31 + 7) % 512, tgt[i] = (i * 17 + 3) % 512;
  size_t n;
  float lc, lg;
  float *pc = par_gpt_params(cpu, &n);
  tensor_t hp = tensor_view1(pc, TENSOR_F32, TENSOR_CPU, (int64_t)n);
  tensor_t dp = tensor_view1(par_gpt_params(gpu, NULL), TENSOR_F32, DEV, (int64_t)n);
  float *pg = fetch(&dp);
  checks++;
  if (memcmp(pg, pc, n * sizeof(float))) failures++, printf("FAIL model initialisation differs\n");
  else printf("ok   model initialisation identical\n");
  free(pg);
  if (par_gpt_forward(cpu, tok, tgt, B, T, &lc) || par_gpt_backward(cpu) ||
      par_gpt_forward(gpu, tok, tgt, B, T, &lg) || par_gpt_backward(gpu)) {
    printf("FAIL model step: %s / %s\n", par_gpt_last_error(cpu), par_gpt_last_error(gpu));
    failures++;
    goto done;
  }
  double tol_loss = bf16 ? 1e-2 : 1e-4, tol_grad = bf16 ? 5e-2 : 1e-3;
  checks += 2;
  const char *mode = head_chunk ? (bf16 ? "bf16 GEMMs, head chunks of 48" : "f32, head chunks of 48")
                     : bf16    ? "bf16 GEMMs"
                     : recompute ? "f32, recompute"
                                 : "f32";
  printf("%s model loss (%s) cpu %.6f gpu %.6f\n", fabs(lc - lg) <= tol_loss ? "ok  " : "FAIL", mode, lc, lg);
  failures += !(fabs(lc - lg) <= tol_loss);
  tensor_t dg = tensor_view1(par_gpt_grads(gpu, NULL), TENSOR_F32, DEV, (int64_t)n);
  float *gg = fetch(&dg);
  double r = rel_diff(gg, par_gpt_grads(cpu, NULL), n);
  printf("%s model gradients (%s): relative 2-norm difference %.3g (tolerance %.0e)\n",
         r <= tol_grad ? "ok  " : "FAIL", mode, r, tol_grad);
  failures += !(r <= tol_grad);
  free(gg);
  (void)hp;
done:
  par_gpt_destroy(cpu);
  par_gpt_destroy(gpu);
}

/* cuDNN's fused attention (bf16 contexts) against the CPU in f32, forward and
 * backward. Tolerance, from bf16's 8-bit mantissa (inputs rounded with
 * relative error u = 2^-9):
 * - scores s = scale q.k carry |ds| <= d = scale (2u + u^2) max_ij sum_c |q_ic k_jc|
 *   (f32 accumulation adds nothing comparable);
 * - so softmax weights move by a factor within e^{+-2d}; P is rounded to bf16
 *   for the second GEMM (u), V was rounded (u) and O is rounded on output (u):
 *   |dO_ic| <= (2d + 3u) max|v| with unit-scale data, checked per element
 *   (about 0.03 for uniform [-1, 1) data and hs 64, a bound, not a typical);
 * - the statistics are f32 from the same scores: |dlse| <= d;
 * - the gradients multiply about six rounded factors (P, dO, V in dP, the bf16
 *   dS, K or Q, the bf16 output) and the score error: each element is off by a
 *   few u relative to the sum of magnitudes it adds up, so we check the
 *   relative 2-norm difference against 2e-2 (10 u), and expect a few 1e-3.
 * And where cuDNN loaded, its result must differ from strata's f32 kernel (or
 * cuDNN did not run). */
static void test_attention_cudnn(int B, int T, int NH, int hs) {
  int C = NH * hs, version = tensor_cudnn_version();
  char name[96];
  snprintf(name, sizeof name, "cuDNN attention B%d T%d NH%d hs%d", B, T, NH, hs);
  if (!version) {
    printf("skip %-40s (libcudnn.so.9 not found)\n", name);
    return;
  }
  int64_t sq[3] = {B, T, 3 * C}, so[3] = {B, T, C}, sl[3] = {B, NH, T};
  tensor_t q = hrand(3, sq, 61, 1.f), o = hrand(3, so, 62, 1.f), l = hrand(3, sl, 63, 1.f);
  tensor_t dq = todev(&q), dout = todev(&o), dl = todev(&l), own = todev(&o), ownl = todev(&l);
  must(tensor_attention_forward(ctx, &o, &l, &q, NH), name);
  must(tensor_attention_forward(ctx16, &dout, &dl, &dq, NH), name);
  must(tensor_attention_forward(ctx, &own, &ownl, &dq, NH), name);
  const float *x = q.data;
  double smax = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++)
        for (int j = 0; j <= i; j++) {
          const float *qi = x + ((size_t)b * T + i) * 3 * C + h * hs, *kj = x + ((size_t)b * T + j) * 3 * C + C + h * hs;
          double a = 0;
          for (int c = 0; c < hs; c++) a += fabs((double)qi[c] * kj[c]);
          smax = a > smax ? a : smax;
        }
  double u = 1.0 / 512, d = (2 * u + u * u) * smax / sqrt((double)hs);
  expect(name, &dout, &o, (2 * d + 3 * u), 0, NULL, 0);
  char lname[128];
  snprintf(lname, sizeof lname, "%s lse", name);
  expect(lname, &dl, &l, d + 1e-5, 1e-5, NULL, 0);
  float *g16 = fetch(&dout), *gown = fetch(&own);
  int64_t no = tensor_numel(&o);
  checks++;
  if (!memcmp(g16, gown, (size_t)no * sizeof(float))) {
    failures++;
    printf("FAIL %-40s equals strata's f32 kernel bit for bit: cuDNN did not run\n", name);
  }
  free(g16), free(gown);
  /* backward, accumulating into the same random dqkv on both sides */
  tensor_t g = hrand(3, so, 64, 1.f), gq = hrand(3, sq, 65, 1.f), dg = todev(&g), dgq = todev(&gq);
  must(tensor_attention_backward(ctx, &gq, &g, &q, &o, &l, NH), name);
  must(tensor_attention_backward(ctx16, &dgq, &dg, &dq, &dout, &dl, NH), name);
  float *gg = fetch(&dgq);
  int64_t nq = tensor_numel(&q);
  double r = rel_diff(gg, gq.data, (size_t)nq);
  checks++;
  failures += !(r <= 2e-2);
  printf("%s %-40s backward: relative 2-norm difference %.3g (tolerance 2e-2)\n", r <= 2e-2 ? "ok  " : "FAIL", name, r);
  free(gg);
  tensor_t all[12] = {q, o, l, dq, dout, dl, own, ownl, g, gq, dg, dgq};
  freeall(all, 12);
}

/* ---- 16-bit activations (bf16, f16) on the device against the CPU in f32 ----
 *
 * Each op gets the same input values on both sides: the host inputs are
 * rounded to the 16-bit dtype first (rounded(): exact in f32), the CPU runs
 * its f32 op on them, the device its 16-bit op. Every kernel accumulates in
 * f32, so the device result differs from the CPU's only by
 * - the f32 summation order, as for the f32 checks above (1e-5 + 1e-4 |x|
 *   for row and element-wise ops, 1e-5 sum_k |a b| for GEMMs), and
 * - rounding the result to the 16-bit dtype: round to nearest even keeps p
 *   significant bits (bf16: 7 stored + the implicit one, p = 8; f16: p =
 *   11), a relative error of at most u = 2^-p (bf16 2^-8, f16 2^-11; 2^-9
 *   is bf16's u only against the nearest power of two below), once per
 *   stored value. An op that accumulates into a 16-bit gradient (din +=)
 *   rounds the sum once: u |result|, the f32 terms unchanged.
 * - GEMMs with a bias in a separate kernel round twice (the product, then
 *   product + bias): 2u (|z| + |b|) <= 2u (S + |b|), S = sum_k |a b|.
 * - The weights stay f32 on the device and are rounded to the activations'
 *   dtype in the GEMM: the CPU multiplies the same rounded weights.
 * Parameter gradients (dweight, dbias) and statistics (mean, rstd, lse,
 * losses) are f32 computed from identical inputs: the f32 tolerances. */

static double act_u(tensor_dtype_t dt) { return dt == TENSOR_BF16 ? 1.0 / 256 : 1.0 / 2048; }
static const char *act_name(tensor_dtype_t dt) { return dt == TENSOR_BF16 ? "bf16" : "f16"; }

/* A device f32 copy of a 16-bit device tensor (exact), for expect(). */
static tensor_t widen(const tensor_t *d16) {
  tensor_t w;
  if (tensor_alloc(ctx, &w, TENSOR_F32, DEV, d16->ndim, d16->shape) || tensor_cast(ctx, &w, d16)) {
    fprintf(stderr, "widen: %s\n", tensor_last_error(ctx));
    exit(2);
  }
  return w;
}

static void expect16(const char *fmt, tensor_dtype_t dt, const tensor_t *g16, const tensor_t *cpu, double atol,
                     double rtol, const double *scale, double srel) {
  char what[96];
  snprintf(what, sizeof what, fmt, act_name(dt));
  tensor_t w = widen(g16);
  expect(what, &w, cpu, atol, rtol, scale, srel);
  tensor_free(ctx, &w);
}

/* layernorm, residual add + layernorm, GELU, add, bias add. */
static void test_act16_rows(tensor_dtype_t dt) {
  double u = act_u(dt);
  int64_t sx[2] = {300, 768}, sw[1] = {768}, sr[1] = {300};
  tensor_t x = hrand(2, sx, 121, 2.f), w = hrand(1, sw, 122, 1.f), b = hrand(1, sw, 123, 1.f);
  tensor_t o = hrand(2, sx, 124, 1.f), mu = hrand(1, sr, 125, 1.f), rs = hrand(1, sr, 126, 1.f), x16, o16;
  tensor_t xr = rounded(&x, dt, &x16), orr = rounded(&o, dt, &o16);
  tensor_t dw = todev(&w), dbv = todev(&b), dmu = todev(&mu), drs = todev(&rs);
  must(tensor_layernorm_forward(ctx, &orr, &mu, &rs, &xr, &w, &b, 1e-5f), "ln cpu");
  must(tensor_layernorm_forward(ctx, &o16, &dmu, &drs, &x16, &dw, &dbv, 1e-5f), "ln 16-bit gpu");
  expect16("layernorm forward, %s activations", dt, &o16, &orr, 1e-5, 1e-4 + u, NULL, 0);
  expect("layernorm mean (16-bit in)", &dmu, &mu, 1e-5, 1e-4, NULL, 0);
  expect("layernorm rstd (16-bit in)", &drs, &rs, 1e-5, 1e-4, NULL, 0);
  /* backward: din (16-bit, accumulated) += ..., dweight, dbias f32 */
  tensor_t g = hrand(2, sx, 127, 1.f), gx = hrand(2, sx, 128, 1.f), gw = hrand(1, sw, 129, 1.f), gb = hrand(1, sw, 130, 1.f);
  tensor_t g16, gx16, gr = rounded(&g, dt, &g16), gxr = rounded(&gx, dt, &gx16), dgw = todev(&gw), dgb = todev(&gb);
  must(tensor_layernorm_backward(ctx, &gxr, &gw, &gb, &gr, &xr, &w, &mu, &rs), "ln bwd cpu");
  must(tensor_layernorm_backward(ctx, &gx16, &dgw, &dgb, &g16, &x16, &dw, &dmu, &drs), "ln bwd 16-bit gpu");
  expect16("layernorm din, %s activations", dt, &gx16, &gxr, 1e-4, 1e-4 + u, NULL, 0);
  expect("layernorm dweight (16-bit activations)", &dgw, &gw, 1e-4, 1e-4, NULL, 0);
  expect("layernorm dbias (16-bit activations)", &dgb, &gb, 1e-4, 1e-4, NULL, 0);
  /* GELU forward and backward (din accumulates) */
  must(tensor_gelu_forward(ctx, &orr, &xr), "gelu cpu");
  must(tensor_gelu_forward(ctx, &o16, &x16), "gelu 16-bit gpu");
  expect16("gelu forward, %s activations", dt, &o16, &orr, 1e-5, 1e-4 + u, NULL, 0);
  must(tensor_gelu_backward(ctx, &gxr, &gr, &xr), "gelu bwd cpu");
  must(tensor_gelu_backward(ctx, &gx16, &g16, &x16), "gelu bwd 16-bit gpu");
  expect16("gelu backward, %s activations", dt, &gx16, &gxr, 1e-4, 1e-4 + u, NULL, 0);
  /* residual add (out = a + b: one f32 add, rounded) and its backward (+=) */
  must(tensor_add_forward(ctx, &orr, &xr, &gr), "add cpu");
  must(tensor_add_forward(ctx, &o16, &x16, &g16), "add 16-bit gpu");
  expect16("residual add, %s activations", dt, &o16, &orr, 0, u, NULL, 0);
  must(tensor_add_backward(ctx, &gxr, NULL, &gr), "add bwd cpu");
  must(tensor_add_backward(ctx, &gx16, NULL, &g16), "add bwd 16-bit gpu");
  expect16("residual add backward, %s activations", dt, &gx16, &gxr, 1e-5, 1e-4 + u, NULL, 0);
  /* bias add: out = in + b (rounded), dbias f32 column sums of the 16-bit dout */
  must(tensor_bias_add_forward(ctx, &orr, &xr, &b), "bias cpu");
  must(tensor_bias_add_forward(ctx, &o16, &x16, &dbv), "bias 16-bit gpu");
  expect16("bias add, %s activations", dt, &o16, &orr, 0, u, NULL, 0);
  must(tensor_bias_add_backward(ctx, NULL, &gb, &gr), "bias bwd cpu");
  must(tensor_bias_add_backward(ctx, NULL, &dgb, &g16), "bias bwd 16-bit gpu");
  expect("bias add dbias (16-bit dout)", &dgb, &gb, 1e-4, 1e-4, NULL, 0);
  /* residual add + layernorm: resid rounded once (u); the layernorm of the
   * device's rounded resid, against the CPU's layernorm of those same values */
  tensor_t r16, rr = rounded(&o, dt, &r16), out16, outr = rounded(&o, dt, &out16);
  tensor_t sum = hrand(2, sx, 131, 1.f);
  must(tensor_add_forward(ctx, &sum, &xr, &gr), "sum cpu");
  must(tensor_residual_layernorm_forward(ctx, &r16, &out16, &dmu, &drs, &x16, &g16, &dw, &dbv, 1e-5f), "res ln 16-bit");
  expect16("residual layernorm sum, %s activations", dt, &r16, &sum, 0, u, NULL, 0);
  float *rd = fetch(&r16); /* (16-bit) */
  tensor_t r16h = tensor_view(rd, dt, TENSOR_CPU, 2, sx), rw = hrand(2, sx, 132, 1.f);
  must(tensor_cast(ctx, &rw, &r16h), "resid widen");
  must(tensor_layernorm_forward(ctx, &outr, &mu, &rs, &rw, &w, &b, 1e-5f), "ln of resid cpu");
  expect16("residual layernorm forward, %s activations", dt, &out16, &outr, 1e-5, 1e-4 + u, NULL, 0);
  expect("residual layernorm rstd (16-bit)", &drs, &rs, 1e-5, 1e-4, NULL, 0);
  free(rd);
  tensor_t all[] = {x, w, b, o, mu, rs, x16, o16, xr, orr, dw, dbv, dmu, drs, g, gx, gw, gb, g16, gx16, gr, gxr,
                    dgw, dgb, r16, rr, out16, outr, sum, rw};
  freeall(all, (int)(sizeof all / sizeof *all));
}

/* linear forward / backward and linear + GELU with 16-bit activations and
 * f32 weights (rounded to the activations' dtype in the GEMM). */
static void test_act16_linear(tensor_dtype_t dt) {
  double u = act_u(dt);
  enum { R = 4 * 33, K = 48, N = 80 };
  int64_t si[3] = {4, 33, K}, sw[2] = {N, K}, sb[1] = {N}, so[3] = {4, 33, N};
  tensor_t x = hrand(3, si, 141, 1.f), w = hrand(2, sw, 142, 0.5f), b = hrand(1, sb, 143, 1.f), o = hrand(3, so, 144, 1.f);
  tensor_t x16, o16, w16, xr = rounded(&x, dt, &x16), orr = rounded(&o, dt, &o16), wr = rounded(&w, dt, &w16);
  tensor_t dw = todev(&w), db = todev(&b);
  must(tensor_linear_forward(ctx, &orr, &xr, &wr, &b), "linear cpu");
  must(tensor_linear_forward(ctx, &o16, &x16, &dw, &db), "linear 16-bit gpu");
  int64_t s2[2] = {R, K};
  tensor_t x2 = tensor_view(xr.data, TENSOR_F32, TENSOR_CPU, 2, s2);
  double *S = abs_products(&x2, &wr, 0, 1, 1, R, N, K, 1);
  for (int r = 0; r < R; r++)
    for (int j = 0; j < N; j++) S[r * N + j] += fabs(((float *)b.data)[j]);
  expect16("linear forward, %s activations, f32 weight", dt, &o16, &orr, 1e-6, 0, S, 2 * u + 1e-5);
  /* linear + GELU: pre rounded as above, out = gelu(pre16) rounded */
  tensor_t p16, pr = rounded(&o, dt, &p16), a16, ar = rounded(&o, dt, &a16);
  must(tensor_linear_act_forward(ctx, &o16, &p16, &x16, &dw, &db, TENSOR_ACT_GELU), "linear gelu 16-bit gpu");
  must(tensor_linear_forward(ctx, &pr, &xr, &wr, &b), "linear (pre) cpu");
  expect16("linear+gelu pre, %s activations", dt, &p16, &pr, 1e-6, 0, S, 2 * u + 1e-5);
  float *pd = fetch(&p16);
  tensor_t ph = tensor_view(pd, dt, TENSOR_CPU, 3, so);
  must(tensor_cast(ctx, &pr, &ph), "pre widen");
  must(tensor_gelu_forward(ctx, &ar, &pr), "gelu of the device's pre cpu");
  expect16("linear+gelu out, %s activations", dt, &o16, &ar, 1e-5, 1e-4 + u, NULL, 0);
  free(pd);
  /* backward: din (16-bit) += dout W, dW, db f32 */
  tensor_t g = hrand(3, so, 145, 1.f), gx = hrand(3, si, 146, 1.f), gw = hrand(2, sw, 147, 1.f), gb = hrand(1, sb, 148, 1.f);
  tensor_t g16, gx16, gr = rounded(&g, dt, &g16), gxr = rounded(&gx, dt, &gx16), dgw = todev(&gw), dgb = todev(&gb);
  float *before = malloc(tensor_nbytes(&gxr)); /* din's value before: rounding applies to before + sum */
  memcpy(before, gxr.data, tensor_nbytes(&gxr));
  must(tensor_linear_backward(ctx, &gxr, &gw, &gb, &gr, &xr, &wr), "linear bwd cpu");
  must(tensor_linear_backward(ctx, &gx16, &dgw, &dgb, &g16, &x16, &dw), "linear bwd 16-bit gpu");
  int64_t sg[2] = {R, N};
  tensor_t g2 = tensor_view(gr.data, TENSOR_F32, TENSOR_CPU, 2, sg);
  double *Sx = abs_products(&g2, &wr, 0, 0, 1, R, K, N, 1);  /* sum_n |dout w| per din element */
  double *Sw = abs_products(&g2, &x2, 1, 0, 1, N, K, R, 1);  /* sum_r |dout x| per dW element */
  for (int i = 0; i < R * K; i++) Sx[i] = (u + 1e-5) * Sx[i] + u * fabs(before[i]);
  free(before);
  expect16("linear din, %s activations", dt, &gx16, &gxr, 1e-6, 0, Sx, 1.0);
  expect("linear dweight (16-bit activations)", &dgw, &gw, 1e-6, 1e-6, Sw, 1e-5);
  expect("linear dbias (16-bit activations)", &dgb, &gb, 1e-4, 1e-4, NULL, 0);
  free(S), free(Sx), free(Sw);
  tensor_t all[] = {x, w, b, o, x16, o16, w16, xr, orr, wr, dw, db, p16, pr, a16, ar, g, gx, gw, gb, g16, gx16,
                    gr, gxr, dgw, dgb};
  freeall(all, (int)(sizeof all / sizeof *all));
}

/* Embedding with 16-bit output: one f32 add, rounded (u); its backward
 * reads 16-bit dout into the f32 tables (f32 atomics: the f32 tolerance). */
static void test_act16_embedding(tensor_dtype_t dt) {
  double u = act_u(dt);
  int B = 3, T = 40, C = 64, V = 1000;
  int32_t ids[120];
  for (int i = 0; i < B * T; i++) ids[i] = (i * 7919) % 97;
  int64_t si[2] = {B, T}, se[2] = {V, C}, sp[2] = {T, C}, so[3] = {B, T, C};
  tensor_t hid = tensor_view(ids, TENSOR_I32, TENSOR_CPU, 2, si), did = todev(&hid);
  tensor_t e = hrand(2, se, 151, 1.f), p = hrand(2, sp, 152, 1.f), o = hrand(3, so, 153, 1.f), o16;
  tensor_t orr = rounded(&o, dt, &o16), de = todev(&e), dp = todev(&p);
  must(tensor_embedding_forward(ctx, &orr, &hid, &e, &p), "emb cpu");
  must(tensor_embedding_forward(ctx, &o16, &did, &de, &dp), "emb 16-bit gpu");
  expect16("embedding forward, %s output", dt, &o16, &orr, 0, u, NULL, 0);
  tensor_t g = hrand(3, so, 154, 1.f), g16, gr = rounded(&g, dt, &g16);
  must(tensor_embedding_backward(ctx, &e, &p, &gr, &hid), "emb bwd cpu");
  must(tensor_embedding_backward(ctx, &de, &dp, &g16, &did), "emb bwd 16-bit gpu");
  expect("embedding dwte (16-bit dout)", &de, &e, 1e-5, 1e-4, NULL, 0);
  expect("embedding dwpe (16-bit dout)", &dp, &p, 1e-5, 1e-4, NULL, 0);
  tensor_t all[] = {did, e, p, o, o16, orr, de, dp, g, g16, gr};
  freeall(all, (int)(sizeof all / sizeof *all));
}

/* Attention with 16-bit q, k, v, out and gradients against the CPU in f32 on
 * the same (rounded) qkv. bf16 goes to cuDNN as it is (where it loads),
 * whose P and dS are rounded to bf16 inside: test_attention_cudnn's bound
 * (2d + 3u) max|v| with d its score bound, plus u for the output's
 * rounding, and the backward's relative 2-norm 2e-2 (about 5 u). f16 (and
 * bf16 where cuDNN is absent) runs strata's f32 kernel on f32 copies: only
 * the output rounding, u |o| (forward) and u |dqkv| (backward), besides the
 * f32 kernel's own tolerances. lse is f32 either way. */
static void test_act16_attention(tensor_dtype_t dt, int B, int T, int NH, int hs) {
  double u = act_u(dt);
  int C = NH * hs, dnn = dt == TENSOR_BF16 && tensor_cudnn_version() > 0;
  char name[96];
  snprintf(name, sizeof name, "attention %s B%d T%d NH%d hs%d", act_name(dt), B, T, NH, hs);
  int64_t sq[3] = {B, T, 3 * C}, so[3] = {B, T, C}, sl[3] = {B, NH, T};
  tensor_t q = hrand(3, sq, 161, 1.f), o = hrand(3, so, 162, 1.f), l = hrand(3, sl, 163, 1.f), q16, o16;
  tensor_t qr = rounded(&q, dt, &q16), orr = rounded(&o, dt, &o16), dl = todev(&l);
  must(tensor_attention_forward(ctx, &orr, &l, &qr, NH), name);
  must(tensor_attention_forward(ctx, &o16, &dl, &q16, NH), name);
  double d = 0;
  if (dnn) {
    const float *x = qr.data;
    double smax = 0;
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++)
        for (int i = 0; i < T; i++)
          for (int j = 0; j <= i; j++) {
            const float *qi = x + ((size_t)b * T + i) * 3 * C + h * hs, *kj = x + ((size_t)b * T + j) * 3 * C + C + h * hs;
            double a = 0;
            for (int c = 0; c < hs; c++) a += fabs((double)qi[c] * kj[c]);
            smax = a > smax ? a : smax;
          }
    d = (2 * u + u * u) * smax / sqrt((double)hs);
  }
  char what[128];
  snprintf(what, sizeof what, "%s forward", name);
  tensor_t ow = widen(&o16);
  if (dnn) expect(what, &ow, &orr, 2 * d + 4 * u, 0, NULL, 0);
  else expect(what, &ow, &orr, 1e-5, 1e-4 + u, NULL, 0);
  snprintf(what, sizeof what, "%s lse", name);
  expect(what, &dl, &l, d + 1e-5, 1e-4, NULL, 0);
  /* backward, accumulating into the same (rounded) random dqkv on both sides */
  tensor_t g = hrand(3, so, 164, 1.f), gq = hrand(3, sq, 165, 1.f), g16, gq16;
  tensor_t gr = rounded(&g, dt, &g16), gqr = rounded(&gq, dt, &gq16);
  must(tensor_attention_backward(ctx, &gqr, &gr, &qr, &orr, &l, NH), name);
  must(tensor_attention_backward(ctx, &gq16, &g16, &q16, &o16, &dl, NH), name);
  snprintf(what, sizeof what, "%s backward", name);
  tensor_t gw = widen(&gq16);
  if (dnn) {
    float *gg = fetch(&gw);
    double r = rel_diff(gg, gqr.data, (size_t)tensor_numel(&gqr));
    checks++;
    failures += !(r <= 2e-2);
    printf("%s %-40s relative 2-norm difference %.3g (tolerance 2e-2)\n", r <= 2e-2 ? "ok  " : "FAIL", what, r);
    free(gg);
  } else {
    expect(what, &gw, &gqr, 1e-4, 1e-3 + u, NULL, 0);
  }
  tensor_t all[] = {q, o, l, q16, o16, qr, orr, dl, ow, g, gq, g16, gq16, gr, gqr, gw};
  freeall(all, (int)(sizeof all / sizeof *all));
}

/* The fused classifier with 16-bit h (and dh): the CPU runs on the rounded
 * h and the weight rounded as the device rounds it. The logits are f32 GEMMs
 * of identical 16-bit operands (e = 1e-5 relative to S_r, the f32 bound);
 * lse and losses as in test_classifier. dlogits is rounded to the dtype
 * before the backward GEMMs (u per product) and dh is rounded when stored
 * (u |dh|): the products' bound of test_classifier with k = u + 1e-5, plus
 * u |dh| for dh; dweight is f32: k only. */
static void test_act16_classifier(tensor_dtype_t dt, int chunk) {
  enum { R = 300, C = 96, V = 1000 };
  double u = act_u(dt), e = 1e-5, k = u + 1e-5;
  int64_t sh[2] = {R, C}, sw[2] = {V, C}, sr[1] = {R}, sz[2] = {R, V};
  tensor_t h = hrand(2, sh, 171, 1.f), w = hrand(2, sw, 172, 0.1f), l = hrand(1, sr, 173, 1.f), ls = hrand(1, sr, 174, 1.f);
  tensor_t dh = hrand(2, sh, 175, 0.01f), dw = hrand(2, sw, 176, 0.01f), z = hrand(2, sz, 177, 1.f), tg;
  tensor_t h16, w16, dh16, hr = rounded(&h, dt, &h16), wr = rounded(&w, dt, &w16), dhr = rounded(&dh, dt, &dh16);
  tensor_alloc(ctx, &tg, TENSOR_I32, TENSOR_CPU, 1, sr);
  for (int r = 0; r < R; r++) ((int32_t *)tg.data)[r] = r % 11 == 5 ? -1 : (r * 37 + 11) % V;
  tensor_t gw = todev(&w), gl = todev(&l), gls = todev(&ls), gdw = todev(&dw), gtg = todev(&tg);
  float dloss = 1.f / 270;
  must(tensor_classifier_xent(ctx, &l, &ls, &dhr, &dw, &hr, &wr, &tg, dloss, chunk), "classifier cpu");
  must(tensor_classifier_xent(ctx, &gl, &gls, &dh16, &gdw, &h16, &gw, &gtg, dloss, chunk), "classifier 16-bit gpu");
  must(tensor_linear_forward(ctx, &z, &hr, &wr, NULL), "logits cpu");
  const float *H = hr.data, *W = wr.data, *Z = z.data, *LS = ls.data, *DH = dhr.data;
  const int32_t *T = tg.data;
  double *S, smax, *tl, *tl2, *sdh, *sdw;
  classifier_bounds(H, W, Z, LS, T, R, V, C, dloss, e, &S, &smax, &tl, &tl2, &sdh, &sdw);
  double f = 2 * e * smax + k;
  for (int i = 0; i < R * C; i++) sdh[i] = f * sdh[i] + u * (fabs(DH[i]) + f * sdh[i] + 1e-7);
  char what[96];
  snprintf(what, sizeof what, "classifier lse (%s h, chunk %d)", act_name(dt), chunk);
  expect(what, &gls, &ls, 0, 1e-5, tl, 1.0);
  snprintf(what, sizeof what, "classifier losses (%s h, chunk %d)", act_name(dt), chunk);
  expect(what, &gl, &l, 0, 1e-5, tl2, 1.0);
  snprintf(what, sizeof what, "classifier dh (%%s, chunk %d)", chunk);
  expect16(what, dt, &dh16, &dhr, 1e-7, u, sdh, 1.0);
  snprintf(what, sizeof what, "classifier dweight (%s h, chunk %d)", act_name(dt), chunk);
  expect(what, &gdw, &dw, 1e-7, 0, sdw, f);
  free(S), free(tl), free(tl2), free(sdh), free(sdw);
  tensor_t all[] = {h, w, l, ls, dh, dw, z, tg, h16, w16, dh16, hr, wr, dhr, gw, gl, gls, gdw, gtg};
  freeall(all, (int)(sizeof all / sizeof *all));
}

/* The GPT model with 16-bit activations (par_gpt_options_t.act_dtype) on the
 * device against the CPU model in f32. Every stored activation and
 * activation gradient is rounded (u each: bf16 2^-8, f16 2^-11) and every
 * GEMM takes 16-bit operands; through 2 blocks a value passes about 10
 * roundings forward and 15 backward (the residual gradient accumulates into
 * its 16-bit buffer in each block), each a relative error <= u that
 * compounds at most additively: ~25 u = 10% (bf16) and 1.2% (f16) as a
 * worst case on a single element, much less in the 2-norm where the errors
 * are of both signs. bf16: loss within 2e-2 of ln V = 6.2 and gradients
 * within 1e-1 relative 2-norm (2x the bf16_matmul model's, which rounds the
 * GEMM inputs only); f16: loss 1e-2 and gradients 5e-2, the bf16_matmul
 * model's (f16 rounding is 8x finer but the GEMM operands are f16 too). */
static void test_model_act16(tensor_dtype_t dt, int recompute) {
  par_gpt_config_t c = {.layers = 2, .hidden = 128, .heads = 4, .seq = 64, .vocab = 512, .recompute = recompute};
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  par_gpt_t *cpu = NULL, *gpu = NULL;
  o.device = DEV, o.act_dtype = dt;
  if (par_gpt_create(&cpu, &c, 5) || par_gpt_create_ex(&gpu, &c, &o, 5)) {
    printf("FAIL model create (%s activations): %s\n", act_name(dt), par_gpt_create_error());
    failures++;
    goto done;
  }
  int B = 4, T = 64;
  int32_t tok[256], tgt[256];
  for (int i = 0; i < B * T; i++) tok[i] = (i * 31 + 7) % 512, tgt[i] = i % 13 == 4 ? -1 : (i * 17 + 3) % 512;
  size_t n;
  float lc, lg;
  par_gpt_params(cpu, &n);
  if (par_gpt_forward(cpu, tok, tgt, B, T, &lc) || par_gpt_backward(cpu) ||
      par_gpt_forward(gpu, tok, tgt, B, T, &lg) || par_gpt_backward(gpu)) {
    printf("FAIL model step (%s activations): %s / %s\n", act_name(dt), par_gpt_last_error(cpu),
           par_gpt_last_error(gpu));
    failures++;
    goto done;
  }
  double tol_loss = dt == TENSOR_BF16 ? 2e-2 : 1e-2, tol_grad = dt == TENSOR_BF16 ? 1e-1 : 5e-2;
  checks += 3;
  printf("%s model loss (%s activations%s) cpu %.6f gpu %.6f (tolerance %.0e)\n",
         fabs(lc - lg) <= tol_loss ? "ok  " : "FAIL", act_name(dt), recompute ? ", recompute" : "", lc, lg, tol_loss);
  failures += !(fabs(lc - lg) <= tol_loss);
  tensor_t dg = tensor_view1(par_gpt_grads(gpu, NULL), TENSOR_F32, DEV, (int64_t)n);
  float *gg = fetch(&dg);
  double r = rel_diff(gg, par_gpt_grads(cpu, NULL), n);
  printf("%s model gradients (%s activations%s): relative 2-norm difference %.3g (tolerance %.0e)\n",
         r <= tol_grad ? "ok  " : "FAIL", act_name(dt), recompute ? ", recompute" : "", r, tol_grad);
  failures += !(r <= tol_grad);
  free(gg);
  /* the activations take half the f32 model's bytes: the store is 16-bit */
  size_t cur16 = 0, cur32 = 0;
  par_gpt_t *g32 = NULL;
  par_gpt_options_t o32 = o;
  o32.act_dtype = TENSOR_F32;
  par_gpt_memory(gpu, &cur16, NULL);
  if (par_gpt_create_ex(&g32, &c, &o32, 5) || par_gpt_forward(g32, tok, tgt, B, T, &lg)) {
    printf("FAIL f32 device model: %s\n", g32 ? par_gpt_last_error(g32) : par_gpt_create_error());
    failures++;
  } else {
    par_gpt_memory(g32, &cur32, NULL);
    size_t params = 2 * n * sizeof(float); /* parameters and gradients, f32 in both */
    double ratio = (double)(cur16 - params) / (double)(cur32 - params);
    /* f32 parts (statistics, lse, losses) and alignment keep it a bit above 1/2 */
    int ok = ratio > 0.45 && ratio < 0.6;
    printf("%s model activation bytes (%s) / f32's: %.3f (expected about 0.5)\n", ok ? "ok  " : "FAIL", act_name(dt),
           ratio);
    failures += !ok;
  }
  par_gpt_destroy(g32);
done:
  par_gpt_destroy(cpu);
  par_gpt_destroy(gpu);
}

/* Every 16-bit activation check, for bf16 and f16. */
static void test_act16(void) {
  for (int dt = TENSOR_BF16; dt <= TENSOR_F16; dt++) {
    test_act16_rows((tensor_dtype_t)dt);
    test_act16_linear((tensor_dtype_t)dt);
    test_act16_embedding((tensor_dtype_t)dt);
    test_act16_attention((tensor_dtype_t)dt, 2, 64, 4, 64);
    test_act16_attention((tensor_dtype_t)dt, 2, 100, 4, 64);
    test_act16_classifier((tensor_dtype_t)dt, 64);
    test_act16_classifier((tensor_dtype_t)dt, 0);
    test_model_act16((tensor_dtype_t)dt, 0);
    test_model_act16((tensor_dtype_t)dt, 1);
  }
}

int main(void) {
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  if (tensor_ctx_create(&ctx, &o)) return 2;
  if (tensor_cuda_device_count() == 0) {
    tensor_t probe;
    int64_t one = 1;
    tensor_alloc(ctx, &probe, TENSOR_F32, DEV, 1, &one); /* fails; its message says why */
    printf("gpu_equiv: skipped: %s\n", tensor_last_error(ctx));
    tensor_ctx_destroy(ctx);
    return 77;
  }
  o.bf16_matmul = 1;
  if (tensor_ctx_create(&ctx16, &o)) return 2;
  test_matmul();
  test_linear_bias_add();
  test_layernorm_gelu();
  test_layernorm_split();
  test_attention(2, 100, 4, 32);
  test_attention(1, 77, 2, 64);
  test_attention(1, 40, 1, 128); /* > 48 KiB of shared memory in the backward */
  test_attention_decode(2, 37, 64, 4, 32);
  test_attention_decode(1, 1, 8, 12, 64);
  test_attention_decode(1, 1000, 1024, 12, 64); /* GPT-2's context */
  test_attention(3, 1, 2, 16);   /* one token: only the diagonal */
  test_attention(2, 17, 3, 8);   /* a second tile with one row; hs < 32 lanes */
  test_attention_block(2, 37, 37, 4, 32); /* ring attention's blocks (Tq = Tk) */
  test_attention_block(1, 20, 33, 3, 24);
  test_attention_block(2, 50, 50, 2, 40);
  test_attention_block(1, 64, 64, 2, 64);
  test_copy_columns();
  test_embedding_xent_dropout();
  test_16bit_gemms();
  test_casts();
  test_ragged();
  test_errors();
  /* cuDNN's fused attention on the bf16 context (skipped where cuDNN is absent);
   * T 100 is no multiple of cuDNN's 64-row tiles */
  test_attention_cudnn(2, 64, 4, 64);
  test_attention_cudnn(2, 128, 4, 64);
  test_attention_cudnn(2, 100, 4, 64);
  test_attention_cudnn(1, 256, 2, 128);
  test_residual_layernorm();
  test_classifier(0, 64); /* 300 rows: 4 chunks of 64 and one of 44 */
  test_classifier(0, 0);
  test_classifier(1, 64);
  test_classifier(1, 0);
  test_model(0, 0, 0);
  test_model(0, 1, 0);
  test_model(1, 0, 0);
  test_model(0, 0, 48); /* 256 rows: 5 chunks of 48 and one of 16 */
  test_model(1, 0, 48);
  test_act16();
  tensor_ctx_destroy(ctx16);
  tensor_ctx_destroy(ctx);
  printf("gpu_equiv: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
