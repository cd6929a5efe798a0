/* CUDA vs CPU: the same steps of SGD (Nesterov), AdamW, LAMB and LARS, with
 * clipping and the two-phase API, on 46 tensors (one of 70 M elements, more
 * chunks than one launch holds; 46 tensors, more than one launch's tensor
 * table; one empty), two groups, bf16 and f16 copies. Plain program for `make
 * test-gpu`: exit 0 when the backends agree, 1 when not, 77 without a GPU.
 *
 * Tolerances: both backends run the same fp32 formulas with the same
 * host-computed constants, but nvcc and gcc contract a*b+c into FMAs in
 * different places, so an element of m or v differs by an ulp or two of
 * its terms; the trust ratios come from double sums added in different
 * orders (relative 1e-7 at worst through the fp32 moments). After 3 steps
 * an update (~1e-3 of |p|) carries a relative error ~1e-6, i.e. p agrees
 * to ~1e-9 absolute for |p| ~ 1: we allow |dp| <= 1e-6 |p| + 1e-8 and for
 * the moments 1e-5 relative plus 1e-7 of the gradient scale. Sums: 1e-6
 * relative. The low-precision copy must be exactly the rounding of the
 * device's own fp32 parameters (strata/half.h). */
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

static void check(const char *what, int kind, int k, const float *a, const float *b, size_t n,
                  double rtol, double atol) {
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= rtol * fmax(fabs(a[i]), fabs(b[i])) + atol)) {
      if (failures++ < 20)
        fprintf(stderr, "gpu_equiv: kind %d tensor %d %s[%zu]: cpu %.9g cuda %.9g\n", kind, k, what,
                i, (double)a[i], (double)b[i]);
      return;
    }
  }
}

static void check_sums(const char *what, int kind, const double *a, const double *b, int n) {
  for (int i = 0; i < n; i++)
    if (!(fabs(a[i] - b[i]) <= 1e-6 * fmax(fabs(a[i]), fabs(b[i])) + 1e-30)) {
      if (failures++ < 20)
        fprintf(stderr, "gpu_equiv: kind %d %s[%d]: cpu %.12g cuda %.12g\n", kind, what, i, a[i],
                b[i]);
      return;
    }
}

static void run_kind(int kind) {
  optim *oc = NULL, *og = NULL;
  char err[256];
  optim_config cfg = OPTIM_CONFIG_DEFAULTS;
  cfg.kind = kind;
  cfg.threads = 0;
  if (optim_create(&oc, &cfg, err, sizeof err)) {
    fprintf(stderr, "gpu_equiv: cpu: %s\n", err);
    exit(1);
  }
  cfg.device = OPTIM_CUDA;
  if (optim_create(&og, &cfg, err, sizeof err)) {
    fprintf(stderr, "gpu_equiv: cuda: %s\n", err);
    exit(1);
  }
  optim_group g0 = optim_group_defaults(kind), g1;
  if (kind == OPTIM_SGD) {
    g0.momentum = 0.9f;
    g0.nesterov = 1;
    g0.weight_decay = 1e-4f;
  }
  g1 = g0;
  g1.weight_decay = 0;
  g1.adapt = 0;
  int id0, id1;
  if (optim_add_group(oc, &g0, &id0) || optim_add_group(oc, &g1, &id1) ||
      optim_add_group(og, &g0, &id0) || optim_add_group(og, &g1, &id1)) {
    fprintf(stderr, "gpu_equiv: groups: %s %s\n", optim_last_error(oc), optim_last_error(og));
    exit(1);
  }
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
      hp[k][i] = urand();
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
      fprintf(stderr, "gpu_equiv: grad_sumsq: %s / %s\n", optim_last_error(oc),
              optim_last_error(og));
      exit(1);
    }
    check_sums("grad sumsq", kind, sc, sg, NT);
    double tot = 0;
    for (int k = 0; k < NT; k++)
      tot += sc[k];
    float gs;
    optim_grad_scale(tot, 1.0f, 20.0f, &gs, NULL);
    if (optim_partials(oc, pc, 2 * NT, tc, NT, gs) || optim_partials(og, pg, 2 * NT, tg, NT, gs)) {
      fprintf(stderr, "gpu_equiv: partials: %s / %s\n", optim_last_error(oc), optim_last_error(og));
      exit(1);
    }
    check_sums("partials", kind, pc, pg, 2 * NT);
    if (optim_apply(oc, tc, NT, pc, 2 * NT, gs) || optim_apply(og, tg, NT, pg, 2 * NT, gs)) {
      fprintf(stderr, "gpu_equiv: apply: %s / %s\n", optim_last_error(oc), optim_last_error(og));
      exit(1);
    }
  }
  CK(cudaDeviceSynchronize());
  for (int k = 0; k < NT; k++) {
    size_t n = sizes[k];
    float *x = malloc((n ? n : 1) * 4);
    uint16_t *l = malloc((n ? n : 1) * 2);
    CK(cudaMemcpy(x, dp[k], n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(l, dl[k], n * 2, cudaMemcpyDeviceToHost));
    check("p", kind, k, hp[k], x, n, 1e-6, 1e-8);
    if (tg[k].lowp_dtype != OPTIM_LOWP_NONE)
      for (size_t i = 0; i < n; i++) {
        uint16_t want = tg[k].lowp_dtype == OPTIM_LOWP_BF16 ? strata_f32_to_bf16(x[i])
                                                            : strata_f32_to_f16(x[i]);
        if (l[i] != want) {
          if (failures++ < 20)
            fprintf(stderr, "gpu_equiv: kind %d tensor %d lowp[%zu] = %#x, want %#x\n", kind, k, i,
                    l[i], want);
          break;
        }
      }
    if (kind != OPTIM_LARS || g0.momentum > 0) {
      CK(cudaMemcpy(x, dm[k], n * 4, cudaMemcpyDeviceToHost));
      check("m", kind, k, hm[k], x, n, 1e-5, 1e-8);
    }
    if (kind == OPTIM_ADAMW || kind == OPTIM_LAMB) {
      CK(cudaMemcpy(x, dv[k], n * 4, cudaMemcpyDeviceToHost));
      check("v", kind, k, hv[k], x, n, 1e-5, 1e-10);
    }
    free(x);
    free(l);
    free(hp[k]);
    free(hg[k]);
    free(hm[k]);
    free(hv[k]);
    free(hl[k]);
    cudaFree(dp[k]);
    cudaFree(dg[k]);
    cudaFree(dm[k]);
    cudaFree(dv[k]);
    cudaFree(dl[k]);
  }
  optim_destroy(oc);
  optim_destroy(og);
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "gpu_equiv: no CUDA device, nothing to compare\n");
    return 77;
  }
  sizes[0] = 70000000; /* 2137 chunks of 32768: more than one launch */
  sizes[1] = 0;
  for (int k = 2; k < NT; k++)
    sizes[k] = 1 + (size_t)(k * 7919u * 37u) % 200000u;
  const int kinds[] = {OPTIM_SGD, OPTIM_ADAMW, OPTIM_LAMB, OPTIM_LARS};
  for (int i = 0; i < 4; i++)
    run_kind(kinds[i]);
  printf("gpu_equiv: %s (%d mismatches)\n", failures ? "FAILED" : "CUDA matches CPU", failures);
  return failures ? 1 : 0;
}
