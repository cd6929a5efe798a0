/* The machine's GEMM peak, for the MFU the progress line shows (as llm.c
 * and Megatron-LM report it). On the CPU: OpenBLAS sgemm of 2048^3 with this
 * rank's threads, the best of 4 after a warm-up (about 0.2 s on 2 cores),
 * cached per CPU model, thread count and OpenBLAS build in
 * $XDG_CACHE_HOME/strata/gemm-peak (default ~/.cache/strata/). On a GPU: the
 * device's dense bf16 peak from libtensor's spec-sheet table, else cuBLAS
 * bf16 GEMMs of 8192^3 measured once and cached per device name in the same
 * file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cblas.h>

#include <strata/tensor.h>

#include "strata_lua.h"

static void cpu_model(char *buf, size_t n) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  snprintf(buf, n, "unknown cpu");
  while (f && fgets(line, sizeof line, f)) {
    char *c = strchr(line, ':');
    if (!strncmp(line, "model name", 10) && c) {
      c += 2;
      c[strcspn(c, "\n")] = 0;
      snprintf(buf, n, "%s", c);
      break;
    }
  }
  if (f) fclose(f);
}

static void cache_path(char *buf, size_t n, int dir_only) {
  const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
  if (x && *x) snprintf(buf, n, "%s/strata%s", x, dir_only ? "" : "/gemm-peak");
  else snprintf(buf, n, "%s/.cache/strata%s", h && *h ? h : "/tmp", dir_only ? "" : "/gemm-peak");
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);

static double measure(int threads) {
  const int n = 2048;
  int before = openblas_get_num_threads(); /* libtensor runs BLAS single-threaded in its own teams */
  openblas_set_num_threads(threads);
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
  double best = 0;
  if (a && b && c) {
    for (long i = 0; i < (long)n * n; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
    for (int r = 0; r < 5; r++) {
      double t0 = now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a, n, b, n, 0.f, c, n);
      double dt = now() - t0, f = 2.0 * n * n * (double)n / dt;
      if (r > 0 && f > best) best = f;
    }
  }
  free(a), free(b), free(c);
  openblas_set_num_threads(before);
  return best;
}

/* The cached value of key (0: none). */
static double cached(const char *key) {
  char path[4096], line[900];
  cache_path(path, sizeof path, 0);
  FILE *f = fopen(path, "r");
  double v = 0;
  while (f && fgets(line, sizeof line, f)) {
    char *sp = strrchr(line, ' ');
    if (sp && (size_t)(sp - line) == strlen(key) && !strncmp(line, key, strlen(key))) v = atof(sp + 1);
  }
  if (f) fclose(f);
  return v;
}

static void remember(const char *key, double v) {
  char path[4096];
  FILE *f;
  cache_path(path, sizeof path, 0);
  if (v > 0) {
    char dir[4096];
    cache_path(dir, sizeof dir, 1);
    char *slash = strrchr(dir, '/');
    if (slash) { /* ~/.cache, then ~/.cache/strata */
      *slash = 0;
      mkdir(dir, 0755);
      *slash = '/';
    }
    mkdir(dir, 0755);
    if ((f = fopen(path, "a"))) {
      fprintf(f, "%s %.6g\n", key, v);
      fclose(f);
    }
  }
}

double lstrata_gemm_peak(int threads, int measure_if_missing, int *measured) {
  char key[700], cpu[256];
  cpu_model(cpu, sizeof cpu);
  snprintf(key, sizeof key, "cpu=%s;threads=%d;blas=%s", cpu, threads, openblas_get_config());
  if (measured) *measured = 0;
  double v = cached(key);
  if (v > 0 || !measure_if_missing) return v;
  v = measure(threads);
  if (measured) *measured = 1;
  remember(key, v);
  return v;
}

double lstrata_device_peak(int device, int measure_if_missing, char *desc, size_t n) {
  char name[256], key[400], err[256] = "";
  if (tensor_cuda_device_name(device, name, sizeof name) != STRATA_OK) {
    snprintf(desc, n, "cuda:%d unknown", device);
    return 0;
  }
  double v = tensor_cuda_table_peak(name);
  if (v > 0) {
    snprintf(desc, n, "%s, bf16 spec sheet", name);
    return v;
  }
  snprintf(key, sizeof key, "gpu=%s;gemm=bf16", name);
  if ((v = cached(key)) > 0) {
    snprintf(desc, n, "%s, cuBLAS bf16 measured, cached", name);
    return v;
  }
  if (!measure_if_missing) return 0;
  v = lstrata_measure_gemm(device, TENSOR_BF16, 8192, err, sizeof err);
  remember(key, v);
  if (v > 0) snprintf(desc, n, "%s, cuBLAS bf16 measured now, cached", name);
  else snprintf(desc, n, "%s: %s", name, err);
  return v;
}

double lstrata_measure_gemm(int device, tensor_dtype_t dt, int n, char *err, size_t en) {
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.threads = device == TENSOR_CPU ? lstrata_threads(NULL, NULL) : 1;
  o.device = device == TENSOR_CPU ? 0 : device;
  tensor_ctx_t *tc = NULL;
  tensor_t a = {0}, b = {0}, c = {0}, f = {0};
  double best = 0;
  int rc = tensor_ctx_create(&tc, &o);
  int64_t shape[2] = {n, n};
  if (!rc) rc = tensor_alloc(tc, &f, TENSOR_F32, device, 2, shape);
  if (!rc) rc = tensor_alloc(tc, &a, dt, device, 2, shape);
  if (!rc) rc = tensor_alloc(tc, &b, dt, device, 2, shape);
  if (!rc) rc = tensor_alloc(tc, &c, TENSOR_F32, device, 2, shape);
  if (!rc) rc = tensor_fill_uniform(tc, &f, 1, "calibrate-a", NULL, -1.f, 1.f);
  if (!rc) rc = dt == TENSOR_F32 ? tensor_copy(tc, &a, &f) : tensor_cast(tc, &a, &f);
  if (!rc) rc = tensor_fill_uniform(tc, &f, 1, "calibrate-b", NULL, -1.f, 1.f);
  if (!rc) rc = dt == TENSOR_F32 ? tensor_copy(tc, &b, &f) : tensor_cast(tc, &b, &f);
  int reps = device == TENSOR_CPU ? 1 : 10;
  for (int r = 0; r < 4 && !rc; r++) { /* run 0 warms up */
    if ((rc = tensor_synchronize(tc))) break;
    double t0 = now();
    for (int k = 0; k < reps && !rc; k++) rc = tensor_matmul(tc, &c, &a, &b, 0, 0, 1.f, 0.f);
    if (!rc) rc = tensor_synchronize(tc);
    double dt_s = now() - t0, rate = reps * 2.0 * n * (double)n * n / dt_s;
    if (!rc && r > 0 && rate > best) best = rate;
  }
  if (rc) {
    snprintf(err, en, "%s", tc ? tensor_last_error(tc) : "cannot create a libtensor context");
    if (!err[0]) snprintf(err, en, "%s", tensor_strerror(rc));
    best = 0;
  }
  if (tc) {
    tensor_free(tc, &a), tensor_free(tc, &b), tensor_free(tc, &c), tensor_free(tc, &f);
    tensor_ctx_destroy(tc);
  }
  return best;
}

