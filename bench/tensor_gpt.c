/* BENCH tensor.<shape>.<device>: one training step (zero_grad + forward +
 * backward) of the serial GPT model, in model FLOP/s (6 N + 6 L h T per token
 * times tokens over the median step time), against the GEMM peak measured in
 * the same run: OpenBLAS sgemm 2048^3 on the same threads (CPU), or a cuBLAS
 * bf16 GEMM 8192^3 with f32 accumulation (CUDA). On the CPU one sgemm sample
 * follows every model step, so both medians see the same neighbours.
 *
 *   bench_tensor_gpt SHAPE [THREADS] [STEPS] [cuda]
 *   bench_tensor_gpu [SHAPE ...]  (GPU machines: without a shape gpt124m-1024
 *                                  then gpt350m-1024 on cuda:0, bf16 GEMMs;
 *                                  exits 77 without a GPU)
 *   SHAPE: gpt124m (L12 h768 12 heads T64 B4 V50304), gptbyte (L6 h384 6 heads
 *          T256 B8 V256), gpt124m-1024 (T1024 B8, for the GPU), gpt350m-1024
 *          (GPT-2 medium: L24 h1024 16 heads T1024 B8 V50304, for the GPU).
 *
 * On CUDA each shape also prints its tokens/s and, where the device is in
 * gpu_peak.h's table of spec-sheet bf16 peaks, a second line
 *   BENCH tensor.<shape>.cuda.mfu value=<model TFLOP/s> unit=TFLOP/s
 *         baseline=<table peak TFLOP/s> ratio=<MFU>
 * (the first line's ratio is the MFU against the measured cuBLAS peak).
 *
 * On the CPU the gpt124m shape prints a second line, BENCH
 * tensor.gpt124m.step.cpu: the whole training step, the fused AdamW update
 * of liboptim over the 124M parameters included, in the same model FLOP/s
 * against the same sgemm peak (the update adds time and no model FLOPs). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cblas.h>
#if !defined(BENCH_GPU_DEFAULTS) /* the GPU binary links libtensor only */
#include <strata/optim.h>
#define WITH_ADAMW 1
#endif
#include <strata/par_gpt.h>
#include <strata/tensor.h>

#include "gpu_gemm.h"
#if defined(BENCH_GPU_DEFAULTS)
#include "gpu_peak.h"
#endif

void openblas_set_num_threads(int num_threads);

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds of this process (all threads), for a figure a busy machine distorts less. */
static double cpu_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double g_gemm_cpu; /* CPU seconds per sgemm in the baseline */

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The CPU baseline: OpenBLAS's own threaded sgemm 2048^3. One sample is
 * taken after every model step, so that both figures see the same load on a
 * shared machine; a pause after each lets OpenBLAS's threads stop spinning
 * before the next model step. */
typedef struct {
  int n;
  float *a, *b, *c;
  double t[64], cpu;
  int count;
} sgemm_bench_t;

static void pause_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static int sgemm_init(sgemm_bench_t *g, int threads) {
  memset(g, 0, sizeof *g);
  int n = g->n = 2048;
  g->a = malloc(sizeof(float) * n * n), g->b = malloc(sizeof(float) * n * n), g->c = malloc(sizeof(float) * n * n);
  if (!g->a || !g->b || !g->c) return -1;
  for (long i = 0; i < (long)n * n; i++) g->a[i] = g->b[i] = (float)((i % 17) - 8) * 0.01f, g->c[i] = 0;
  openblas_set_num_threads(threads); /* warm-up: page faults, thread start */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, g->a, n, g->b, n, 0.f, g->c, n);
  openblas_set_num_threads(1);
  pause_s(0.25);
  return 0;
}

static void sgemm_sample(sgemm_bench_t *g, int threads) {
  int n = g->n;
  openblas_set_num_threads(threads);
  double c0 = cpu_time(), t0 = now();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, g->a, n, g->b, n, 0.f, g->c, n);
  if (g->count < 64) g->t[g->count++] = now() - t0;
  g->cpu += cpu_time() - c0;
  openblas_set_num_threads(1);
  pause_s(0.25);
}

static double sgemm_flops(sgemm_bench_t *g) {
  g_gemm_cpu = g->count ? g->cpu / g->count : 0;
  free(g->a), free(g->b), free(g->c);
  return g->count ? 2.0 * g->n * g->n * g->n / median(g->t, g->count) : 0;
}

/* One shape's figure(s); 0 ok, 77 skipped, else failed. */
static int run_shape(const char *shape, int threads, int steps, int cuda) {
  par_gpt_config_t c = {.layers = 12, .hidden = 768, .heads = 12, .seq = 64, .vocab = 50304};
  int B = 4, T = 64;
  if (!strcmp(shape, "gptbyte")) {
    c = (par_gpt_config_t){.layers = 6, .hidden = 384, .heads = 6, .seq = 256, .vocab = 256};
    B = 8, T = 256;
  } else if (!strcmp(shape, "gpt124m-1024")) {
    c.seq = 1024, B = 8, T = 1024;
  } else if (!strcmp(shape, "gpt350m-1024")) {
    c = (par_gpt_config_t){.layers = 24, .hidden = 1024, .heads = 16, .seq = 1024, .vocab = 50304};
    B = 8, T = 1024;
  } else if (strcmp(shape, "gpt124m")) {
    fprintf(stderr, "bench_tensor_gpt: unknown shape %s (gpt124m, gptbyte, gpt124m-1024, gpt350m-1024)\n", shape);
    return 2;
  }
  if (cuda && tensor_cuda_device_count() == 0) { /* the GPU bundle's convention: 77 = skipped */
    fprintf(stderr, "bench_tensor_gpt: no CUDA device (or a build without CUDA): skipped\n");
    return 77;
  }
  if (steps <= 0) steps = cuda ? 10 : 5;
  par_gpt_options_t o = PAR_GPT_OPTIONS_DEFAULTS;
  o.threads = threads;
  if (cuda) o.device = 0, o.bf16_matmul = 1;
  par_gpt_t *m = NULL;
  if (par_gpt_create_ex(&m, &c, &o, 1234)) {
    fprintf(stderr, "bench_tensor_gpt: %s\n", par_gpt_create_error());
    return 1;
  }
  int32_t *tok = malloc(sizeof(int32_t) * B * T), *tgt = malloc(sizeof(int32_t) * B * T);
  uint32_t s = 7;
  for (int i = 0; i < B * T; i++) {
    s = s * 1664525u + 1013904223u;
    tok[i] = (int32_t)((s >> 8) % (uint32_t)c.vocab);
    tgt[i] = (int32_t)((s >> 3) % (uint32_t)c.vocab);
  }
  double *t = malloc(sizeof(double) * (steps + 1)), *ta = malloc(sizeof(double) * (steps + 1));
  /* AdamW over the flat parameters (the gpt124m CPU step figure) */
#if defined(WITH_ADAMW)
  int with_adam = !cuda && !strcmp(shape, "gpt124m");
  optim *opt = NULL;
  optim_tensor ot = {0};
  float *am = NULL, *av = NULL;
#else
  int with_adam = 0;
#endif
#if defined(WITH_ADAMW)
  if (with_adam) {
    optim_config oc = OPTIM_CONFIG_DEFAULTS;
    oc.threads = threads;
    char err[256];
    size_t np;
    float *p = par_gpt_params(m, &np);
    am = calloc(np, sizeof *am), av = calloc(np, sizeof *av);
    int gid;
    if (!am || !av || optim_create(&opt, &oc, err, sizeof err) || optim_add_group(opt, NULL, &gid)) return 1;
    ot = (optim_tensor){.param = p, .grad = par_gpt_grads(m, NULL), .m = am, .v = av, .group = gid, .n = np};
  }
#endif
  float loss = 0;
  int rc = 0;
  double step_cpu = 0;
  sgemm_bench_t sg;
  if (!cuda && sgemm_init(&sg, threads)) return 1;
  for (int k = 0; k <= steps && !rc; k++) { /* step 0 warms up (allocations, page faults) */
    double t0 = now(), c0 = cpu_time();
    rc = par_gpt_zero_grad(m);
    if (!rc) rc = par_gpt_forward(m, tok, tgt, B, T, &loss);
    if (!rc) rc = par_gpt_backward(m);
    if (!rc) rc = par_gpt_synchronize(m); /* device work is asynchronous */
    t[k] = now() - t0;
#if defined(WITH_ADAMW)
    if (with_adam && !rc) {
      double a0 = now();
      rc = optim_step(opt, &ot, 1, 1.f);
      ta[k] = t[k] + now() - a0;
    }
#endif
    if (k > 0) step_cpu += (cpu_time() - c0) / steps;
    if (!cuda && k > 0) sgemm_sample(&sg, threads);
  }
  if (rc) {
    fprintf(stderr, "bench_tensor_gpt: %s\n", par_gpt_last_error(m));
    return 1;
  }
  double tmed = median(t + 1, steps), flops = par_gpt_flops_per_token(&c, T) * B * T / tmed;
  double tmin = t[1], tmax = t[1];
  for (int k = 1; k <= steps; k++) tmin = t[k] < tmin ? t[k] : tmin, tmax = t[k] > tmax ? t[k] : tmax;
  par_gpt_destroy(m);
  double base = cuda ? gpu_gemm_peak(0) : sgemm_flops(&sg);
  fprintf(stderr, "# %s: step median %.3f s (min %.3f, max %.3f over %d), loss %.3f, %.1f GFLOP/s; "
          "GEMM peak %.1f GFLOP/s\n", shape, tmed, tmin, tmax, steps, loss, flops / 1e9, base / 1e9);
  if (!cuda) /* FLOP per CPU-second, model over sgemm: what the process did with the cycles it got */
    fprintf(stderr, "# %s: CPU-time ratio %.3f (step %.3f CPU-s, sgemm %.3f CPU-s)\n", shape,
            par_gpt_flops_per_token(&c, T) * B * T / step_cpu / (2.0 * 2048 * 2048 * 2048 / g_gemm_cpu),
            step_cpu, g_gemm_cpu);
  char name[64];
  snprintf(name, sizeof name, "%s", shape);
  char *dash = strstr(name, "-1024");
  if (dash) *dash = 0; /* gpt124m-1024 -> gpt124m */
  printf("BENCH tensor.%s.%s value=%.4g unit=FLOP/s baseline=%.4g ratio=%.3f\n", name, cuda ? "cuda" : "cpu", flops,
         base, base > 0 ? flops / base : 0);
#if defined(BENCH_GPU_DEFAULTS)
  if (cuda) { /* tokens/s, and MFU against the spec sheet's peak where the table knows the device */
    char dev[256];
    double peak = gpu_table_peak(0, dev, sizeof dev);
    fprintf(stderr, "# %s: %.0f tokens/s on %s; MFU %.3f of the measured cuBLAS bf16 peak (%.1f TFLOP/s)", shape,
            B * T / tmed, dev, base > 0 ? flops / base : 0, base / 1e12);
    if (peak > 0) fprintf(stderr, ", %.3f of the table's %.1f TFLOP/s\n", flops / peak, peak / 1e12);
    else fprintf(stderr, "; no table peak for this device\n");
    if (peak > 0)
      printf("BENCH tensor.%s.cuda.mfu value=%.4g unit=TFLOP/s baseline=%.4g ratio=%.3f\n", name, flops / 1e12,
             peak / 1e12, flops / peak);
  }
#endif
  if (with_adam) {
    double tstep = median(ta + 1, steps), fs = par_gpt_flops_per_token(&c, T) * B * T / tstep;
    fprintf(stderr, "# %s: step with AdamW median %.3f s (update %.3f s)\n", shape, tstep, tstep - tmed);
    printf("BENCH tensor.%s.step.cpu value=%.4g unit=FLOP/s baseline=%.4g ratio=%.3f\n", shape, fs, base,
           base > 0 ? fs / base : 0);
  }
#if defined(WITH_ADAMW)
  optim_destroy(opt);
  free(am), free(av);
#endif
  free(tok), free(tgt), free(t), free(ta);
  return 0;
}

int main(int argc, char **argv) {
  /* libtensor's OpenMP threads own the cores; idle ones must sleep rather
   * than spin, or on a shared machine they take the cycles the working
   * threads need (measured here: 3.5 s -> 2.5 s per gptbyte step at load 4).
   * libgomp reads the policy once, before main, so set it and start again,
   * as strata's runner does. */
  if (!getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);
  }
#if defined(BENCH_GPU_DEFAULTS) /* the GPU bench binary: GPT-2 124M then 350M, T 1024, B 8, bf16 GEMMs */
  if (argc <= 1) {
    int rc = run_shape("gpt124m-1024", 1, 0, 1);
    return rc ? rc : run_shape("gpt350m-1024", 1, 0, 1);
  }
  const char *shape = argv[1];
  int threads = argc > 2 ? atoi(argv[2]) : 1, steps = argc > 3 ? atoi(argv[3]) : 0;
  int cuda = argc > 4 ? !strcmp(argv[4], "cuda") : 1;
#else
  const char *shape = argc > 1 ? argv[1] : "gpt124m";
  int threads = argc > 2 ? atoi(argv[2]) : 2, steps = argc > 3 ? atoi(argv[3]) : 0;
  int cuda = argc > 4 && !strcmp(argv[4], "cuda");
#endif
  return run_shape(shape, threads, steps, cuda);
}
