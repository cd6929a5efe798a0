/* cuBLASLt's fused epilogues against the CPU, which defines the ops as the
 * separate ones composed: the linear layer's bias (CUBLASLT_EPILOGUE_BIAS),
 * bias and GELU with the pre-activation saved (GELU_AUX_BIAS), the input
 * gradient through the GELU (DGELU) and the weight gradient with the bias
 * gradient (BGRADB); f32 and bf16 operands, bf16 and f16 activations, and shapes cuBLASLt's epilogues
 * do not take (N or K not a multiple of 8), which run the separate kernels.
 * A plain program for GPU machines (`make test-gpu`): exit 0 passed, 1
 * failed, 77 skipped (no CUDA device).
 *
 * Tolerances, with S = sum_k |a_k b_k| the sum of absolute products of an
 * output element (+ |bias|):
 * - f32 GEMM (+ bias): the backends sum in different orders, each order's
 *   error is <= K u S with u = 2^-24 (K <= 256 here: < 2e-5 S); checked at
 *   1e-5 S + 1e-6, as tests/tensor/gpu_equiv.c, which holds in practice
 *   because rounding errors do not all align (a wrong term is O(S / K)).
 * - bf16 tensors: the CPU reference multiplies the same rounded values in
 *   f32, where each product of two 8-bit significands is exact, so only the
 *   order of the sums differs: the f32 bound applies.
 * - f32 tensors with bf16 matmuls (the context option): each input rounds
 *   with relative error <= 2^-9, each product by <= 2^-8 + 2^-18, the sum by
 *   <= 2^-7.99 S: checked at 2^-7 S.
 * - GELU after the GEMM: gelu' is at most 1.13, so the pre-activation's
 *   error e_p becomes <= 1.13 e_p; the epilogue may evaluate tanh with the
 *   hardware approximation (relative error 2^-11, PTX tanh.approx.f32),
 *   which moves 0.5 x (1 + t) by <= 2^-12 |x|: out is checked at
 *   1.13 e_p + 2^-12 |pre|. That bound cannot tell GELU's tanh form from its
 *   erf form (they differ by up to 5e-4), so a second check projects the
 *   device's GELU error (against the tanh form of its own pre-activation)
 *   on the difference between the forms: about 1 for the erf form, about 0
 *   for the tanh form (a fast tanh's noise does not correlate with it);
 *   checked < 0.5.
 * - DGELU: the GEMM part v = dout W has error <= 1e-5 S_v, times gelu' <=
 *   1.13; tanh's relative error e = 2^-11 moves gelu'(x) = 0.5 (1 + t) +
 *   0.5 x (1 - t^2) sqrt(2/pi) (1 + 3c x^2) by <= e (0.5 + 0.8 |x| (1 +
 *   0.134 x^2)), times |v|.
 * - bias gradients: column sums of `rows` terms, 1e-5 sum |dout| + 1e-6.
 * - 16-bit activations (bf16 or f16 in, out, pre, dout, din; the weight of
 *   that dtype or f32, rounded to it on the device): the CPU reference runs
 *   in f32 on the same rounded inputs, whose products are exact in f32 (8-
 *   or 11-bit significands), so the f32 GEMM bound holds before the output
 *   is stored; each stored value then rounds with relative error u = 2^-8
 *   (bf16) or 2^-11 (f16), as tests/tensor/gpu_equiv.c. The epilogue rounds
 *   the bias to the output's dtype (u |b|, inside u S: S counts |b|) and the
 *   output once (u |out|); the separate kernels (ragged shapes) round the GEMM's
 *   result (u |x w^T| <= u S) and then the sum with the bias (u |out|):
 *   out and pre are checked at (1e-5 + u) S + u |out| + 1e-6; the GELU out
 *   at 1.13 that (the pre-activation's error, rounding included) + 2^-12
 *   |pre| + u |out|. dW and dbias are f32 sums of the same 16-bit values
 *   (the epilogue's bias gradient as tcu_bias_backward's: f32 accumulation
 *   of dout's stored values), so the f32 bounds hold. The input gradient
 *   through the GELU: v = dout W rounded (separate: u |v|, times gelu' <=
 *   1.13) or gelu'(pre) v rounded once, then accumulated into din and
 *   rounded (u |din|): the f32 bound + 1.13 u |v| + u |din|. The erf/tanh
 *   projection is skipped for bf16 outputs: their rounding noise (2^-9
 *   |out|, several times the forms' 5e-4 difference) would dominate it on
 *   the small shapes; f32 and f16 check the same GELU epilogue. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/tensor.h>

static tensor_ctx_t *ctx, *ctx16;
static int failures, checks;

#ifndef DEV
#define DEV 0 /* -DDEV=-1 runs the checks CPU against CPU, to test this program */
#endif

static void die(const char *what) {
  printf("FAIL %s: %s\n", what, tensor_last_error(ctx));
  exit(1);
}

static tensor_t hrand(int64_t r, int64_t c, uint64_t seed, float scale) {
  tensor_t t;
  int64_t s[2] = {r, c};
  if (tensor_alloc(ctx, &t, TENSOR_F32, TENSOR_CPU, 2, s) ||
      tensor_fill_uniform(ctx, &t, seed, "gpu_epilogue", NULL, -scale, scale))
    die("host tensor");
  return t;
}
static tensor_t vec(int64_t n, uint64_t seed, float scale) {
  tensor_t t;
  if (tensor_alloc(ctx, &t, TENSOR_F32, TENSOR_CPU, 1, &n) ||
      tensor_fill_uniform(ctx, &t, seed, "gpu_epilogue", NULL, -scale, scale))
    die("host vector");
  return t;
}
static tensor_t todev(const tensor_t *h, tensor_dtype_t dt) {
  tensor_t d, f;
  if (tensor_alloc(ctx, &f, TENSOR_F32, DEV, h->ndim, h->shape) || tensor_copy(ctx, &f, h)) die("device copy");
  if (dt == TENSOR_F32) return f;
  if (tensor_alloc(ctx, &d, dt, DEV, h->ndim, h->shape) || tensor_cast(ctx, &d, &f)) die("device cast");
  tensor_free(ctx, &f);
  return d;
}
/* The host tensor rounded to dt (bf16 or f16) and back (what a 16-bit GEMM
 * multiplies). */
static tensor_t rounded_to(const tensor_t *h, tensor_dtype_t dt) {
  tensor_t b, r;
  if (tensor_alloc(ctx, &b, dt, TENSOR_CPU, h->ndim, h->shape) || tensor_cast(ctx, &b, h) ||
      tensor_alloc(ctx, &r, TENSOR_F32, TENSOR_CPU, h->ndim, h->shape) || tensor_cast(ctx, &r, &b))
    die("rounding");
  tensor_free(ctx, &b);
  return r;
}
/* A device tensor (any dtype) as f32 host values. */
static float *fetch(const tensor_t *d) {
  float *p = malloc(tensor_numel(d) * sizeof(float));
  tensor_t h = tensor_view(p, TENSOR_F32, TENSOR_CPU, d->ndim, d->shape), f;
  if (d->dtype == TENSOR_F32) {
    if (tensor_copy(ctx, &h, d)) die("fetch");
    return p;
  }
  if (tensor_alloc(ctx, &f, TENSOR_F32, d->device, d->ndim, d->shape) || tensor_cast(ctx, &f, d) ||
      tensor_copy(ctx, &h, &f))
    die("fetch 16-bit");
  tensor_free(ctx, &f);
  return p;
}
/* Relative rounding error of a stored value of dtype dt (0 for f32). */
static double store_u(tensor_dtype_t dt) {
  return dt == TENSOR_BF16 ? ldexp(1, -8) : dt == TENSOR_F16 ? ldexp(1, -11) : 0;
}
static const char *dt_name(tensor_dtype_t dt) {
  return dt == TENSOR_BF16 ? "bf16" : dt == TENSOR_F16 ? "f16" : "f32";
}

/* |gpu - cpu| <= tol[i] for every i. */
static void expect(const char *what, const float *g, const float *c, const double *tol, int64_t n) {
  double worst = 0;
  int64_t wi = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)g[i] - c[i]) / tol[i];
    if (!(e <= worst)) worst = e, wi = i;
    if (isnan(e)) break;
  }
  checks++;
  if (!(worst <= 1.0)) {
    failures++;
    printf("FAIL %-50s worst %.3g of tolerance at %lld (gpu %g, cpu %g)\n", what, worst, (long long)wi, g[wi], c[wi]);
  } else {
    printf("ok   %-50s worst %.3g of tolerance\n", what, worst);
  }
}

/* sum_k |x_rk w_nk| + |b_n| for out(rows,N) = x w^T + b. */
static double *abs_sums(const float *x, const float *w, const float *b, int64_t rows, int N, int K) {
  double *s = malloc(sizeof(double) * rows * N);
  for (int64_t r = 0; r < rows; r++)
    for (int n = 0; n < N; n++) {
      double a = b ? fabs(b[n]) : 0;
      for (int k = 0; k < K; k++) a += fabs((double)x[r * K + k] * w[n * K + k]);
      s[r * N + n] = a;
    }
  return s;
}

static double gelu_tanh(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_erf(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

/* Forward: linear with bias, and with bias and GELU; dt the input's dtype
 * on the device, odt out's and pre's (f32, or dt: 16-bit activations), wdt
 * the weight's (dt, or f32 with 16-bit activations), c16 the context with
 * bf16 matmuls. */
static void forward(int64_t rows, int N, int K, tensor_dtype_t dt, int c16, tensor_dtype_t odt, tensor_dtype_t wdt) {
  tensor_ctx_t *dc = c16 ? ctx16 : ctx;
  char name[96], tag[48];
  tensor_t x = hrand(rows, K, 1 + N, 1.f), w = hrand(N, K, 2 + N, 0.3f), b = vec(N, 3 + N, 1.f);
  tensor_t xr = dt != TENSOR_F32 ? rounded_to(&x, dt) : x, wr = dt != TENSOR_F32 ? rounded_to(&w, dt) : w;
  tensor_t out = hrand(rows, N, 4, 1.f), pre = hrand(rows, N, 5, 1.f);
  tensor_t dx = todev(&x, dt), dw = todev(&w, wdt), db = todev(&b, TENSOR_F32);
  tensor_t dout = todev(&out, odt), dpre = todev(&pre, odt);
  double *S = abs_sums(xr.data, wr.data, b.data, rows, N, K), *tol = malloc(sizeof(double) * rows * N);
  double rel = c16 ? 1.0 / 128 : 1e-5, u = store_u(odt);
  if (c16)
    snprintf(tag, sizeof tag, "f32, bf16 matmuls");
  else if (odt != TENSOR_F32)
    snprintf(tag, sizeof tag, "%s act, %s weight", dt_name(dt), dt_name(wdt));
  else
    snprintf(tag, sizeof tag, "%s", dt_name(dt));
  /* linear + bias */
  if (tensor_linear_forward(ctx, &out, &xr, &wr, &b)) die("cpu linear");
  if (tensor_linear_forward(dc, &dout, &dx, &dw, &db)) die("gpu linear");
  const float *co = out.data;
  for (int64_t i = 0; i < rows * N; i++) tol[i] = 1e-6 + (rel + u) * S[i] + u * fabs(co[i]);
  float *g = fetch(&dout);
  snprintf(name, sizeof name, "linear+bias %lldx%dx%d %s", (long long)rows, N, K, tag);
  expect(name, g, out.data, tol, rows * N);
  free(g);
  /* linear + bias + GELU */
  if (tensor_linear_act_forward(ctx, &out, &pre, &xr, &wr, &b, TENSOR_ACT_GELU)) die("cpu linear+gelu");
  if (tensor_linear_act_forward(dc, &dout, &dpre, &dx, &dw, &db, TENSOR_ACT_GELU)) die("gpu linear+gelu");
  float *gp = fetch(&dpre), *go = fetch(&dout);
  snprintf(name, sizeof name, "linear+bias+gelu pre %lldx%dx%d %s", (long long)rows, N, K, tag);
  expect(name, gp, pre.data, tol, rows * N);
  const float *cp = pre.data;
  for (int64_t i = 0; i < rows * N; i++)
    tol[i] = 1.13 * tol[i] + ldexp(fabs(cp[i]), -12) + u * fabs(co[i]) + 1e-6;
  snprintf(name, sizeof name, "linear+bias+gelu out %lldx%dx%d %s", (long long)rows, N, K, tag);
  expect(name, go, out.data, tol, rows * N);
  /* Project the device's GELU error on the difference between the forms:
   * about 1 for the erf form, about 0 for the tanh form whatever noise a
   * fast tanh adds (uncorrelated with that difference, averaged over
   * rows x N elements). */
  double dot = 0, norm = 0;
  if (odt == TENSOR_BF16) goto skip_form;
  for (int64_t i = 0; i < rows * N; i++) {
    double t = gelu_tanh(gp[i]), diff = gelu_erf(gp[i]) - t;
    dot += (go[i] - t) * diff, norm += diff * diff;
  }
  checks++;
  if (!(dot / norm < 0.5)) {
    failures++;
    printf("FAIL %-50s projection on erf - tanh forms %.3g (1: the erf form)\n", "gelu epilogue is the tanh form",
           dot / norm);
  } else {
    printf("ok   %-50s projection on erf - tanh forms %.3g\n", "gelu epilogue is the tanh form", dot / norm);
  }
skip_form:
  free(gp), free(go), free(S), free(tol);
  if (dt != TENSOR_F32) tensor_free(ctx, &xr), tensor_free(ctx, &wr);
  tensor_t all[10] = {x, w, b, out, pre, dx, dw, db, dout, dpre};
  for (int i = 0; i < 10; i++) tensor_free(ctx, &all[i]);
}

/* Backward: dW and dbias (BGRADB) and the input gradient through the GELU
 * (DGELU), gradients starting at 0.25 (they accumulate); adt the
 * activations' dtype on the device (pre, act, dout, din_pre, dact), wdt the
 * weight's (adt or f32); dW and dbias f32. The CPU reference takes the
 * 16-bit values in f32. */
static void backward(int64_t rows, int N, int K, tensor_dtype_t adt, tensor_dtype_t wdt) {
  char name[96], tag[48];
  tensor_t p = hrand(rows, K, 11 + K, 2.f), w = hrand(N, K, 12 + K, 0.3f), g = hrand(rows, N, 13 + K, 1.f);
  tensor_t act = hrand(rows, K, 0, 0.f), dact = hrand(rows, K, 0, 0.f);
  tensor_t dp = hrand(rows, K, 0, 0.f), dw = hrand(N, K, 0, 0.f), dbv = vec(N, 0, 0.f);
  double u = store_u(adt);
  if (adt != TENSOR_F32) { /* the values the device holds */
    tensor_t r[3] = {rounded_to(&p, adt), rounded_to(&w, adt), rounded_to(&g, adt)};
    tensor_free(ctx, &p), tensor_free(ctx, &w), tensor_free(ctx, &g);
    p = r[0], w = r[1], g = r[2];
  }
  if (tensor_gelu_forward(ctx, &act, &p)) die("gelu");
  if (adt != TENSOR_F32) {
    tensor_t r = rounded_to(&act, adt);
    tensor_free(ctx, &act);
    act = r;
  }
  tensor_t gs[3] = {dp, dw, dbv};
  for (int i = 0; i < 3; i++) tensor_fill(ctx, &gs[i], 0.25f);
  tensor_t Dp = todev(&p, adt), Dw = todev(&w, wdt), Dg = todev(&g, adt);
  tensor_t Dact = todev(&act, adt), Ddact = todev(&dact, adt);
  tensor_t Ddp = todev(&dp, adt), Ddw = todev(&dw, TENSOR_F32), Ddb = todev(&dbv, TENSOR_F32);
  if (adt != TENSOR_F32)
    snprintf(tag, sizeof tag, " %s act, %s weight", dt_name(adt), dt_name(wdt));
  else
    tag[0] = 0;
  if (tensor_linear_act_backward(ctx, &dp, &dact, &dw, &dbv, &g, &act, &w, &p, TENSOR_ACT_GELU))
    die("cpu backward");
  if (tensor_linear_act_backward(ctx, &Ddp, &Ddact, &Ddw, &Ddb, &Dg, &Dact, &Dw, &Dp, TENSOR_ACT_GELU))
    die("gpu backward");
  /* dact on the CPU holds v = dout W, the GELU's incoming gradient. */
  const float *G = g.data, *A = act.data, *W = w.data, *P = p.data, *V = dact.data;
  double *tol = malloc(sizeof(double) * rows * (K > N ? K : N) + sizeof(double) * N * K);
  for (int64_t r = 0; r < rows; r++)
    for (int k = 0; k < K; k++) {
      double s = 0, x = fabs(P[r * K + k]);
      for (int n = 0; n < N; n++) s += fabs((double)G[r * N + n] * W[n * K + k]);
      tol[r * K + k] = 1e-6 + 1.13e-5 * s + ldexp(0.5 + 0.8 * x * (1 + 0.134 * x * x), -11) * fabs(V[r * K + k]) +
                       1.13 * u * fabs(V[r * K + k]) + u * fabs(((const float *)dp.data)[r * K + k]);
    }
  float *f = fetch(&Ddp);
  snprintf(name, sizeof name, "dgelu input gradient %lldx%dx%d%s", (long long)rows, N, K, tag);
  expect(name, f, dp.data, tol, rows * K);
  free(f);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) {
      double s = 0;
      for (int64_t r = 0; r < rows; r++) s += fabs((double)G[r * N + n] * A[r * K + k]);
      tol[n * K + k] = 1e-6 + 1e-5 * s;
    }
  f = fetch(&Ddw);
  snprintf(name, sizeof name, "weight gradient %lldx%dx%d%s", (long long)rows, N, K, tag);
  expect(name, f, dw.data, tol, (int64_t)N * K);
  free(f);
  for (int n = 0; n < N; n++) {
    double s = 0;
    for (int64_t r = 0; r < rows; r++) s += fabs(G[r * N + n]);
    tol[n] = 1e-6 + 1e-5 * s;
  }
  f = fetch(&Ddb);
  snprintf(name, sizeof name, "bias gradient %lldx%dx%d%s", (long long)rows, N, K, tag);
  expect(name, f, dbv.data, tol, N);
  free(f), free(tol);
  tensor_t all[16] = {p, w, g, act, dact, dp, dw, dbv, Dp, Dw, Dg, Dact, Ddact, Ddp, Ddw, Ddb};
  for (int i = 0; i < 16; i++) tensor_free(ctx, &all[i]);
}

int main(void) {
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  if (tensor_ctx_create(&ctx, &o)) return 2;
  if (DEV >= 0 && tensor_cuda_device_count() == 0) {
    printf("gpu_epilogue: skipped: no CUDA device\n");
    tensor_ctx_destroy(ctx);
    return 77;
  }
  o.bf16_matmul = 1;
  if (tensor_ctx_create(&ctx16, &o)) return 2;
  /* GPT-like shapes (multiples of 8: the fused path), then ragged ones (the
   * separate kernels). */
  int64_t rows[3] = {96, 200, 37};
  int Ns[3] = {256, 64, 45}, Ks[3] = {64, 256, 30};
  for (int i = 0; i < 3; i++) {
    forward(rows[i], Ns[i], Ks[i], TENSOR_F32, 0, TENSOR_F32, TENSOR_F32);
    if (DEV >= 0) forward(rows[i], Ns[i], Ks[i], TENSOR_BF16, 0, TENSOR_F32, TENSOR_BF16);
    forward(rows[i], Ns[i], Ks[i], TENSOR_F32, 1, TENSOR_F32, TENSOR_F32);
    backward(rows[i], Ns[i], Ks[i], TENSOR_F32, TENSOR_F32);
    if (DEV < 0) continue; /* 16-bit activations need a CUDA device */
    tensor_dtype_t act16[2] = {TENSOR_BF16, TENSOR_F16};
    for (int j = 0; j < 2; j++) { /* 16-bit activations, the weight of their dtype or f32 */
      forward(rows[i], Ns[i], Ks[i], act16[j], 0, act16[j], act16[j]);
      forward(rows[i], Ns[i], Ks[i], act16[j], 0, act16[j], TENSOR_F32);
      backward(rows[i], Ns[i], Ks[i], act16[j], act16[j]);
      backward(rows[i], Ns[i], Ks[i], act16[j], TENSOR_F32);
    }
  }
  tensor_ctx_destroy(ctx16);
  tensor_ctx_destroy(ctx);
  printf("gpu_epilogue: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
