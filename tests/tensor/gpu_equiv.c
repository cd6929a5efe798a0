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
 * - the model in f32: gradient vectors agree to 1e-3 relative (2-norm); in
 *   bf16 (inputs of every GEMM rounded, ~40 GEMMs deep) to 5e-2, and the loss
 *   to 1e-2 absolute around ln V ~ 5.5 (an error of 0.2% per GEMM input
 *   compounding through 2 layers, with margin). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/half.h>
#include <strata/parallel.h>
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
    if (!(e <= worst)) worst = e, wi = i;
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
  expect("attention lse", &dl, &l, 1e-5, 1e-4, NULL, 0);
  tensor_t g = hrand(3, so, 34, 1.f), gq = hrand(3, sq, 35, 1.f), dg = todev(&g), dgq = todev(&gq);
  must(tensor_attention_backward(ctx, &gq, &g, &q, &o, &l, NH), name);
  must(tensor_attention_backward(ctx, &dgq, &dg, &dq, &dout, &dl, NH), name);
  strcat(name, " backward");
  expect(name, &dgq, &gq, 1e-4, 1e-3, NULL, 0);
  tensor_t all[10] = {q, o, l, dq, dout, dl, g, gq, dg, dgq};
  freeall(all, 10);
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

static double rel_diff(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
  return sqrt(num / (den > 0 ? den : 1));
}

static void test_model(int bf16) {
  par_gpt_config_t c = {.layers = 2, .hidden = 128, .heads = 4, .seq = 64, .vocab = 512};
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  par_gpt_t *cpu = NULL, *gpu = NULL;
  o.device = DEV;
  o.bf16_matmul = bf16;
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
  printf("%s model loss (%s) cpu %.6f gpu %.6f\n", fabs(lc - lg) <= tol_loss ? "ok  " : "FAIL",
         bf16 ? "bf16 GEMMs" : "f32", lc, lg);
  failures += !(fabs(lc - lg) <= tol_loss);
  tensor_t dg = tensor_view1(par_gpt_grads(gpu, NULL), TENSOR_F32, DEV, (int64_t)n);
  float *gg = fetch(&dg);
  double r = rel_diff(gg, par_gpt_grads(cpu, NULL), n);
  printf("%s model gradients (%s): relative 2-norm difference %.3g (tolerance %.0e)\n",
         r <= tol_grad ? "ok  " : "FAIL", bf16 ? "bf16 GEMMs" : "f32", r, tol_grad);
  failures += !(r <= tol_grad);
  free(gg);
  (void)hp;
done:
  par_gpt_destroy(cpu);
  par_gpt_destroy(gpu);
}

int main(void) {
  if (tensor_cuda_device_count() == 0) {
    printf("gpu_equiv: no CUDA device (or a build without CUDA): skipped\n");
    return 77;
  }
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  if (tensor_ctx_create(&ctx, &o)) return 2;
  o.bf16_matmul = 1;
  if (tensor_ctx_create(&ctx16, &o)) return 2;
  test_matmul();
  test_linear_bias_add();
  test_layernorm_gelu();
  test_attention(2, 100, 4, 32);
  test_attention(1, 77, 2, 64);
  test_attention(1, 40, 1, 128); /* > 48 KiB of shared memory in the backward */
  test_embedding_xent_dropout();
  test_model(0);
  test_model(1);
  tensor_ctx_destroy(ctx16);
  tensor_ctx_destroy(ctx);
  printf("gpu_equiv: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
