/* liboffload's NVMe tier, through the chunk manager:
 *
 *   BENCH offload.nvme.write   bytes/s the tier wrote while chunks were
 *                              evicted to it (device and host tiers of one
 *                              chunk each, every chunk written once in
 *                              order), over a plain sequential pwrite of the
 *                              same chunks to a file opened the same way
 *                              (O_DIRECT where the directory allows it).
 *   BENCH offload.nvme.read    bytes/s of the chunks coming back from it in
 *                              order, over a plain sequential pread.
 *   Goal >= 0.8 each: the manager's bookkeeping and copies cost at most a
 *   fifth of the file system's own throughput.
 *
 * Each figure is the best of REPEATS alternating runs (baseline, manager).
 *   bench_offload_nvme [DIR] [CHUNK_MIB] [CHUNKS] [REPEATS]   (defaults $TMPDIR or /tmp, 4, 32, 3) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <strata/offload.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The plain sequential write and read of n chunks of cb bytes (rates in bytes/s). */
static void plain(const char *dir, int direct, size_t cb, int n, void *buf, double *w, double *r) {
  char path[4096];
  snprintf(path, sizeof path, "%s/strata-bench-plain-%ld", dir, (long)getpid());
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0600);
  if (fd < 0) {
    perror(path);
    exit(1);
  }
  unlink(path);
  double t0 = now();
  for (int i = 0; i < n; i++)
    if (pwrite(fd, buf, cb, (off_t)((size_t)i * cb)) != (ssize_t)cb) perror("pwrite"), exit(1);
  double t1 = now();
  for (int i = 0; i < n; i++)
    if (pread(fd, buf, cb, (off_t)((size_t)i * cb)) != (ssize_t)cb) perror("pread"), exit(1);
  double t2 = now();
  close(fd);
  *w = (double)cb * n / (t1 - t0), *r = (double)cb * n / (t2 - t1);
}

/* Through the manager: a write pass makes each chunk on the host tier (room
 * for one), so that the next one evicts it to the NVMe tier; a read pass
 * brings each back to the device and drops it (FREE), so that nothing is
 * written meanwhile. Rates: bytes the tier moved over each pass's time. */
static void managed(const char *dir, size_t cb, int n, double *w, double *r, int *direct) {
  offload_config_t c = OFFLOAD_CONFIG_DEFAULTS;
  c.chunk_bytes = cb, c.budget[OFFLOAD_DEVICE] = cb, c.budget[OFFLOAD_HOST] = cb;
  c.budget[OFFLOAD_NVME] = (size_t)(n + 2) * cb, c.nvme_dir = dir;
  offload_t *o;
  char err[512];
  if (offload_create(&o, &c, err, sizeof err)) fprintf(stderr, "bench_offload_nvme: %s\n", err), exit(1);
  for (int i = 0, t; i <= n; i++) offload_tensor_add(o, cb, &t);
  offload_stats_t s0, s1, s2;
  offload_stats(o, &s0);
  double t0 = now();
  for (int i = 0; i <= n; i++) /* chunk n pushes chunk n - 1 out */
    if (offload_access(o, i, OFFLOAD_HOST, NULL) || offload_release(o, i, OFFLOAD_HOLD))
      fprintf(stderr, "bench_offload_nvme: %s\n", offload_error(o)), exit(1);
  double t1 = now();
  offload_stats(o, &s1);
  for (int i = 0; i < n; i++)
    if (offload_access(o, i, OFFLOAD_DEVICE, NULL) || offload_release(o, i, OFFLOAD_FREE))
      fprintf(stderr, "bench_offload_nvme: %s\n", offload_error(o)), exit(1);
  double t2 = now();
  offload_stats(o, &s2);
  *w = (double)(s1.moved[OFFLOAD_HOST][OFFLOAD_NVME] - s0.moved[OFFLOAD_HOST][OFFLOAD_NVME]) / (t1 - t0);
  *r = (double)(s2.moved[OFFLOAD_NVME][OFFLOAD_DEVICE] - s1.moved[OFFLOAD_NVME][OFFLOAD_DEVICE]) / (t2 - t1);
  *direct = s2.direct;
  offload_destroy(o);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  size_t cb = (size_t)(argc > 2 ? atoi(argv[2]) : 4) << 20;
  int n = argc > 3 ? atoi(argv[3]) : 32, reps = argc > 4 ? atoi(argv[4]) : 3, direct = 0;
  void *buf;
  if (posix_memalign(&buf, 4096, cb)) return 1;
  memset(buf, 1, cb);
  double pw = 0, pr = 0, mw = 0, mr = 0;
  for (int k = 0; k < reps; k++) {
    double a, b;
    managed(dir, cb, n, &a, &b, &direct);
    if (a > mw) mw = a;
    if (b > mr) mr = b;
    plain(dir, direct, cb, n, buf, &a, &b);
    if (a > pw) pw = a;
    if (b > pr) pr = b;
  }
  free(buf);
  printf("BENCH offload.nvme.write value=%.0f unit=bytes/s baseline=%.0f ratio=%.3f\n", mw, pw, mw / pw);
  printf("BENCH offload.nvme.read value=%.0f unit=bytes/s baseline=%.0f ratio=%.3f\n", mr, pr, mr / pr);
  printf("bench_offload_nvme: %d chunks of %zu MiB in '%s'%s; plain sequential write %.0f MB/s, read %.0f MB/s\n", n,
         cb >> 20, dir, direct ? " (O_DIRECT)" : " (buffered: the file system refused O_DIRECT)", pw / 1e6, pr / 1e6);
  return 0;
}
