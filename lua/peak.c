/* The machine's measured GEMM peak, for the MFU the progress line shows (as
 * llm.c and Megatron-LM report it): OpenBLAS sgemm of 1536^3 with this
 * rank's threads, the best of 4 after a warm-up (about 0.2 s on 2 cores),
 * cached per CPU model, thread count and OpenBLAS build in
 * $XDG_CACHE_HOME/strata/gemm-peak (default ~/.cache/strata/). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cblas.h>

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

double lstrata_gemm_peak(int threads, int measure_if_missing, int *measured) {
  char key[700], cpu[256], path[4096], line[900];
  cpu_model(cpu, sizeof cpu);
  snprintf(key, sizeof key, "cpu=%s;threads=%d;blas=%s", cpu, threads, openblas_get_config());
  cache_path(path, sizeof path, 0);
  if (measured) *measured = 0;
  FILE *f = fopen(path, "r");
  double v = 0;
  while (f && fgets(line, sizeof line, f)) {
    char *sp = strrchr(line, ' ');
    if (sp && (size_t)(sp - line) == strlen(key) && !strncmp(line, key, strlen(key))) v = atof(sp + 1);
  }
  if (f) fclose(f);
  if (v > 0 || !measure_if_missing) return v;
  v = measure(threads);
  if (measured) *measured = 1;
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
  return v;
}
