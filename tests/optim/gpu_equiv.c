/* CUDA vs CPU: the same steps of every optimizer and option, with clipping
 * and the two-phase API, on 46 tensors (more than one launch's tensor table;
 * one empty). The four main cases add a tensor of 70 M elements (more
 * chunks than one launch holds); the others cover SGD without momentum and
 * without Nesterov, AdamW without bias correction, LAMB with both clamps of
 * the trust ratio, LARS without momentum, a tensor of zeros (trust ratio 1)
 * and a stream of the caller's; every case has two groups (the second
 * without weight decay and layer adaptation) and bf16 and f16 copies. Last,
 * inf and nan gradients must give an inf and a nan sum of squares on the
 * device, as on the CPU (what the loss scaler relies on). Plain program for
 * `make test-gpu`: exit 0 when the backends agree, 1 when not, 77 without a
 * GPU.
 *
 * Tolerances: both backends run the same fp32 formulas with the same
 * host-computed constants, but nvcc and gcc contract a*b+c into FMAs in
 * different places, so an element of m or v differs by an ulp or two of
 * its terms; the trust ratios come from double sums added in different
 * orders (relative 1e-7 at worst through the fp32 moments). After 3 steps
 * an update (~1e-3 of |p|) carries a relative error ~1e-6, i.e. p agrees
 * to ~1e-9 absolute for |p| ~ 1: we allow |dp| <= 1e-6 |p| + 1e-8 and for
 * the moments 1e-5 relative plus 1e-8 (m: an ulp of the largest scaled
 * gradient term, ~5e-10, where terms cancel) or 1e-10 (v). Sums: 1e-6
 * relative. The low-precision copy must be exactly the rounding of the
 * device's own fp32 parameters (strata/half.h). These bounds held on a CPU
 * emulation of the kernels compiled with and without FMA contraction. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/half.h>
#include <strata/optim.h>

#define NT 46
#define STEPS 3

static size_t sizes[NT];
static int failures;

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "gpu_equiv: %s: %s\n", #x, cudaGetErrorString(e_));                          \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static uint64_t rs = 88172645463325252ull;
static float urand(void) { /* [-1, 1) */
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void check(const char *what, const char *name, int k, const float *a, const float *b,
                  size_t n, double rtol, double atol) {
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= rtol * fmax(fabs(a[i]), fabs(b[i])) + atol)) {
      if (failures++ < 20)
        fprintf(stderr, "gpu_equiv: %s tensor %d %s[%zu]: cpu %.9g cuda %.9g\n", name, k, what, i,
                (double)a[i], (double)b[i]);
      return;
    }
  }
}

static void check_sums(const char *what, const char *name, const double *a, const double *b,
                       int n) {
  for (int i = 0; i < n; i++)
    if (!(fabs(a[i] - b[i]) <= 1e-6 * fmax(fabs(a[i]), fabs(b[i])) + 1e-30)) {
      if (failures++ < 20)
        fprintf(stderr, "gpu_equiv: %s %s[%d]: cpu %.12g cuda %.12g\n", name, what, i, a[i], b[i]);
      return;
    }
}

/* One case: an optimizer, the options of its first group, and where it runs. */
typedef struct {
  const char *name;
  int kind;
  int big;         /* tensor 0 has 70 M elements */
  float momentum;  /* SGD, LARS */
  int nesterov;    /* SGD */
  int no_bias;     /* AdamW, LAMB: bias_correction = 0 */
  float phi_min, phi_max;
  int zero_tensor; /* tensor 2 starts at zero */
  int own_stream;  /* the CUDA handle runs on a stream of the caller's */
} case_t;

static void run_case(const case_t *cs) {
  const int kind = cs->kind;
  optim *oc = NULL, *og = NULL;
  char err[256];
  cudaStream_t st = NULL;
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = kind;
  cfg.threads = 0;
  if (optim_create(&oc, &cfg, err, sizeof err)) {
    fprintf(stderr, "gpu_equiv: %s: cpu: %s\n", cs->name, err);
    exit(1);
  }
  cfg.device = OPTIM_CUDA;
  if (cs->own_stream) {
    CK(cudaStreamCreate(&st));
    cfg.stream = st;
  }
  if (optim_create(&og, &cfg, err, sizeof err)) {
    fprintf(stderr, "gpu_equiv: %s: cuda: %s\n", cs->name, err);
    exit(1);
  }
  optim_group g0 = optim_group_defaults(kind), g1;
  if (kind == OPTIM_SGD) {
    g0.weight_decay = 1e-4f;
    g0.nesterov = cs->nesterov;
  }
  if (kind == OPTIM_SGD || kind == OPTIM_LARS) g0.momentum = cs->momentum;
  if (cs->no_bias) g0.bias_correction = 0;
  g0.phi_min = cs->phi_min;
  g0.phi_max = cs->phi_max;
  g1 = g0;
  g1.weight_decay = 0;
  g1.adapt = 0;
  int id0, id1;
  if (optim_add_group(oc, &g0, &id0) || optim_add_group(oc, &g1, &id1) ||
      optim_add_group(og, &g0, &id0) || optim_add_group(og, &g1, &id1)) {
    fprintf(stderr, "gpu_equiv: %s: groups: %s %s\n", cs->name, optim_last_error(oc),
            optim_last_error(og));
    exit(1);
  }
  sizes[0] = cs->big ? 70000000 /* 2137 chunks of 32768: more than one launch */
                     : 3 * 32768 + 17;
  sizes[1] = 0;
  for (int k = 2; k < NT; k++)
    sizes[k] = 1 + (size_t)(k * 7919u * 37u) % (cs->big ? 200000u : 40000u);
  float *hp[NT], *hg[NT], *hm[NT], *hv[NT], *dp[NT], *dg[NT], *dm[NT], *dv[NT];
  uint16_t *hl[NT], *dl[NT];
  optim_tensor tc[NT], tg[NT];
  for (int k = 0; k < NT; k++) {
    size_t n = sizes[k], b = (n ? n : 1) * 4;
    hp[k] = malloc(b);
    hg[k] = malloc(b);
    hm[k] = calloc(1, b);
    hv[k] = calloc(1, b);
    hl[k] = calloc(1, b / 2);
    for (size_t i = 0; i < n; i++)
      hp[k][i] = cs->zero_tensor && k == 2 ? 0.0f : urand();
    CK(cudaMalloc((void **)&dp[k], b));
    CK(cudaMalloc((void **)&dg[k], b));
    CK(cudaMalloc((void **)&dm[k], b));
    CK(cudaMalloc((void **)&dv[k], b));
    CK(cudaMalloc((void **)&dl[k], b / 2));
    CK(cudaMemcpy(dp[k], hp[k], n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dm[k], 0, b));
    CK(cudaMemset(dv[k], 0, b));
    int dt = k % 3 == 1 ? OPTIM_LOWP_BF16 : k % 3 == 2 ? OPTIM_LOWP_F16 : OPTIM_LOWP_NONE;
    int grp = k % 4 == 3 ? id1 : id0;
    tc[k] = (optim_tensor){hp[k], hg[k], hm[k], hv[k], hl[k], dt, grp, n};
    tg[k] = (optim_tensor){dp[k], dg[k], dm[k], dv[k], dl[k], dt, grp, n};
  }
  double sc[NT], sg[NT], pc[2 * NT], pg[2 * NT];
  for (int s = 0; s < STEPS; s++) {
    for (int k = 0; k < NT; k++) {
      for (size_t i = 0; i < sizes[k]; i++)
        hg[k][i] = 0.1f * urand();
      CK(cudaMemcpy(dg[k], hg[k], sizes[k] * 4, cudaMemcpyHostToDevice));
    }
    if (optim_grad_sumsq(oc, sc, tc, NT) || optim_grad_sumsq(og, sg, tg, NT)) {
      fprintf(stderr, "gpu_equiv: %s: grad_sumsq: %s / %s\n", cs->name, optim_last_error(oc),
              optim_last_error(og));
      exit(1);
    }
    check_sums("grad sumsq", cs->name, sc, sg, NT);
    double tot = 0;
    for (int k = 0; k < NT; k++)
      tot += sc[k];
    float gs;
    optim_grad_scale(tot, 1.0f, 20.0f, &gs, NULL);
    if (optim_partials(oc, pc, 2 * NT, tc, NT, gs) || optim_partials(og, pg, 2 * NT, tg, NT, gs)) {
      fprintf(stderr, "gpu_equiv: %s: partials: %s / %s\n", cs->name, optim_last_error(oc),
              optim_last_error(og));
      exit(1);
    }
    check_sums("partials", cs->name, pc, pg, 2 * NT);
    if (optim_apply(oc, tc, NT, pc, 2 * NT, gs) || optim_apply(og, tg, NT, pg, 2 * NT, gs)) {
      fprintf(stderr, "gpu_equiv: %s: apply: %s / %s\n", cs->name, optim_last_error(oc),
              optim_last_error(og));
      exit(1);
    }
  }
  CK(cudaDeviceSynchronize());
  const int has_m = kind == OPTIM_ADAMW || kind == OPTIM_LAMB || cs->momentum > 0;
  for (int k = 0; k < NT; k++) {
    size_t n = sizes[k];
    float *x = malloc((n ? n : 1) * 4);
    uint16_t *l = malloc((n ? n : 1) * 2);
    CK(cudaMemcpy(x, dp[k], n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(l, dl[k], n * 2, cudaMemcpyDeviceToHost));
    check("p", cs->name, k, hp[k], x, n, 1e-6, 1e-8);
    if (tg[k].lowp_dtype != OPTIM_LOWP_NONE)
      for (size_t i = 0; i < n; i++) {
        uint16_t want = tg[k].lowp_dtype == OPTIM_LOWP_BF16 ? strata_f32_to_bf16(x[i])
                                                            : strata_f32_to_f16(x[i]);
        if (l[i] != want) {
          if (failures++ < 20)
            fprintf(stderr, "gpu_equiv: %s tensor %d lowp[%zu] = %#x, want %#x\n", cs->name, k, i,
                    l[i], want);
          break;
        }
      }
    if (has_m) {
      CK(cudaMemcpy(x, dm[k], n * 4, cudaMemcpyDeviceToHost));
      check("m", cs->name, k, hm[k], x, n, 1e-5, 1e-8);
    }
    if (kind == OPTIM_ADAMW || kind == OPTIM_LAMB) {
      CK(cudaMemcpy(x, dv[k], n * 4, cudaMemcpyDeviceToHost));
      check("v", cs->name, k, hv[k], x, n, 1e-5, 1e-10);
    }
    free(x);
    free(l);
    free(hp[k]);
    free(hg[k]);
    free(hm[k]);
    free(hv[k]);
    free(hl[k]);
    CK(cudaFree(dp[k]));
    CK(cudaFree(dg[k]));
    CK(cudaFree(dm[k]));
    CK(cudaFree(dv[k]));
    CK(cudaFree(dl[k]));
  }
  optim_destroy(oc);
  optim_destroy(og);
  if (st) CK(cudaStreamDestroy(st));
}

/* Loss scaling's detection: an inf (in a later chunk of a big tensor) and a
 * nan gradient reach the device sums of squares as inf and nan. */
static void nonfinite(void) {
  enum { M = 3 };
  const size_t n[M] = {100000, 5000, 70000};
  optim *oc = NULL, *og = NULL;
  char err[256];
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  if (optim_create(&oc, &cfg, err, sizeof err)) exit(1);
  cfg.device = OPTIM_CUDA;
  if (optim_create(&og, &cfg, err, sizeof err)) {
    fprintf(stderr, "gpu_equiv: nonfinite: cuda: %s\n", err);
    exit(1);
  }
  optim_tensor tc[M], tg[M];
  float *h[M], *d[M];
  memset(tc, 0, sizeof tc);
  memset(tg, 0, sizeof tg);
  for (int k = 0; k < M; k++) {
    h[k] = malloc(n[k] * 4);
    for (size_t i = 0; i < n[k]; i++)
      h[k][i] = urand();
    CK(cudaMalloc((void **)&d[k], n[k] * 4));
    tc[k].grad = h[k];
    tg[k].grad = d[k];
    tc[k].n = tg[k].n = n[k];
  }
  h[0][70001] = INFINITY;
  h[1][4999] = NAN;
  h[1][17] = -INFINITY; /* inf and nan together: nan */
  for (int k = 0; k < M; k++)
    CK(cudaMemcpy(d[k], h[k], n[k] * 4, cudaMemcpyHostToDevice));
  double sc[M], sg[M];
  if (optim_grad_sumsq(oc, sc, tc, M) || optim_grad_sumsq(og, sg, tg, M)) {
    fprintf(stderr, "gpu_equiv: nonfinite: %s / %s\n", optim_last_error(oc), optim_last_error(og));
    exit(1);
  }
  if (!(isinf(sc[0]) && sc[0] > 0 && isinf(sg[0]) && sg[0] > 0 && isnan(sc[1]) && isnan(sg[1]) &&
        isfinite(sg[2]) && fabs(sc[2] - sg[2]) <= 1e-6 * sc[2])) {
    failures++;
    fprintf(stderr, "gpu_equiv: nonfinite sums: cpu %g %g %g, cuda %g %g %g\n", sc[0], sc[1],
            sc[2], sg[0], sg[1], sg[2]);
  }
  float gs = 1.0f;
  double norm = 0.0;
  optim_grad_scale(sg[0] + sg[1] + sg[2], 1024.0f, 1.0f, &gs, &norm);
  if (gs != 0.0f || isfinite(norm)) {
    failures++;
    fprintf(stderr, "gpu_equiv: nonfinite: grad_scale %g norm %g, want 0 and non-finite\n",
            (double)gs, norm);
  }
  for (int k = 0; k < M; k++) {
    free(h[k]);
    CK(cudaFree(d[k]));
  }
  optim_destroy(oc);
  optim_destroy(og);
}

int main(void) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    fprintf(stderr, "gpu_equiv: no CUDA device (%s), nothing to compare\n",
            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  const case_t cases[] = {
      {"sgd-nesterov", OPTIM_SGD, 1, 0.9f, 1, 0, 0, 0, 0, 0},
      {"sgd-momentum", OPTIM_SGD, 0, 0.9f, 0, 0, 0, 0, 0, 0},
      {"sgd-plain", OPTIM_SGD, 0, 0.0f, 0, 0, 0, 0, 0, 1},
      {"adamw", OPTIM_ADAMW, 1, 0, 0, 0, 0, 0, 0, 0},
      {"adamw-no-bias-correction", OPTIM_ADAMW, 0, 0, 0, 1, 0, 0, 0, 1},
      {"lamb", OPTIM_LAMB, 1, 0, 0, 0, 0, 0, 0, 0},
      /* ||x|| ~ sqrt(n / 3) runs from 6 to 181 over the tensors: both clamps bite */
      {"lamb-clamped-zero", OPTIM_LAMB, 0, 0, 0, 0, 30.0f, 60.0f, 1, 0},
      {"lars", OPTIM_LARS, 1, 0.9f, 0, 0, 0, 0, 0, 0},
      {"lars-no-momentum-zero", OPTIM_LARS, 0, 0.0f, 0, 0, 0, 0, 1, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i]);
  nonfinite();
  printf("gpu_equiv: %s (%d mismatches)\n", failures ? "FAILED" : "CUDA matches CPU", failures);
  return failures ? 1 : 0;
}
