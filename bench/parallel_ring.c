/* BENCH parallel.ring.memory: the attention's activation memory per rank
 * with ring self-attention over sp = 4 ranks against the serial attention,
 * at T = 1024 (B = 1, 4 heads of 32): what a forward and backward of
 * attention hold per rank besides the gradients, measured by libtensor's
 * accountant (the inputs kept for backward: qkv, out, lse; the ring's
 * buffers at their peak) and its per-thread score scratch (T x T rows
 * serially, Tl x Tl blocks on the ring). One thread per rank. Goal <= 0.3.
 * Also printed: the ring's forward and backward seconds against the serial
 * attention's on rank 0 (the causal ring leaves the ranks unevenly loaded).
 *
 *   mpirun -np 4 bench_parallel_ring [T]   (default 1024) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <strata/parallel.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static tensor_t mk(tensor_ctx_t *tc, int64_t a, int64_t b, int64_t c, float v) {
  tensor_t t;
  int64_t s[3] = {a, b, c};
  if (tensor_alloc(tc, &t, TENSOR_F32, TENSOR_CPU, 3, s)) MPI_Abort(MPI_COMM_WORLD, 1);
  float *p = t.data;
  for (int64_t i = 0; i < a * b * c; i++) p[i] = v * (float)((i * 7919) % 113) / 113.f;
  return t;
}

/* Bytes an attention forward and backward over (B, T) on this rank hold
 * besides the gradients, and its seconds. ring: over comm, else serial. */
static double measure(comm_t *ring, int B, int T, int NH, int hs, double *seconds) {
  tensor_ctx_t *tc;
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.threads = 1;
  if (tensor_ctx_create(&tc, &o)) MPI_Abort(MPI_COMM_WORLD, 1);
  int C = NH * hs;
  tensor_t dqkv = mk(tc, B, T, 3 * C, 0.f), dout = mk(tc, B, T, C, 1.f);
  size_t base = 0, peak = 0;
  tensor_memory(tc, TENSOR_CPU, &base, NULL);
  tensor_t qkv = mk(tc, B, T, 3 * C, 1.f), out = mk(tc, B, T, C, 0.f), lse = mk(tc, B, NH, T, 0.f);
  char err[512];
  double t0 = now();
  int rc = ring ? par_ring_attention_forward(ring, tc, &out, &lse, &qkv, NH, err, sizeof err)
                : tensor_attention_forward(tc, &out, &lse, &qkv, NH);
  if (!rc)
    rc = ring ? par_ring_attention_backward(ring, tc, &dqkv, &dout, &qkv, &out, &lse, NH, err, sizeof err)
              : tensor_attention_backward(tc, &dqkv, &dout, &qkv, &out, &lse, NH);
  *seconds = now() - t0;
  if (rc) {
    fprintf(stderr, "bench_parallel_ring: %s\n", ring ? err : tensor_last_error(tc));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  tensor_memory(tc, TENSOR_CPU, NULL, &peak);
  double bytes = (double)(peak - base) + (double)tensor_scratch_bytes(tc);
  tensor_t all[] = {dqkv, dout, qkv, out, lse};
  for (int i = 0; i < 5; i++) tensor_free(tc, &all[i]);
  tensor_ctx_destroy(tc);
  return bytes;
}

int main(int argc, char **argv) {
  comm_t *c;
  if (comm_init(&c, NULL)) return 1;
  int rank = comm_rank(c), sp = comm_size(c), T = argc > 1 ? atoi(argv[1]) : 1024;
  if (sp != 4 || T % sp) {
    if (rank == 0) fprintf(stderr, "bench_parallel_ring: run with mpirun -np 4 and T a multiple of 4\n");
    return 1;
  }
  double ts = 0, tr = 0, serial = 0;
  if (rank == 0) serial = measure(NULL, 1, T, 4, 32, &ts);
  comm_barrier(c);
  double ring = measure(c, 1, T / sp, 4, 32, &tr), most = ring;
  MPI_Allreduce(&ring, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  double slowest = tr;
  MPI_Allreduce(&tr, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("# T=%d, 4 heads of 32: serial attention %.2f MiB and %.1f ms; ring over %d ranks %.2f MiB per rank (most) "
           "and %.1f ms (slowest rank)\n",
           T, serial / 1048576, 1e3 * ts, sp, most / 1048576, 1e3 * slowest);
    printf("BENCH parallel.ring.memory value=%.0f unit=bytes baseline=%.0f ratio=%.3f\n", most, serial, most / serial);
  }
  comm_destroy(c);
  comm_finalize();
  return 0;
}
