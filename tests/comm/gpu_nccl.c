/* libcomm's device path on one GPU (one NCCL rank, singleton MPI): every
 * collective on cudaMalloc'd buffers must give the same result as the same
 * call on host buffers (the MPI path), in and out of place, with the same
 * counters. Run by `make test-gpu`; exit status 0 = passed, 77 = no GPU. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/comm.h>

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

enum { N = 1000 };

/* Runs one operation on host and on device copies of the same inputs. */
static void compare(comm_t *c, const char *what, int kind, int inplace) {
  float *h_in = malloc(N * sizeof(float)), *h_out = calloc(N, sizeof(float));
  float *back = calloc(N, sizeof(float)), *d_in, *d_out;
  for (int i = 0; i < N; i++) h_in[i] = (float)(i % 17) - 8.0f;
  cudaMalloc((void **)&d_in, N * sizeof(float));
  cudaMalloc((void **)&d_out, N * sizeof(float));
  cudaMemcpy(d_in, h_in, N * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemset(d_out, 0, N * sizeof(float));
  float *hs = h_in, *hr = inplace ? h_in : h_out, *ds = d_in, *dr = inplace ? d_in : d_out;
  int rh = 0, rd = 0;
  size_t counts[1] = {N};
  switch (kind) {
  case 0:
    rh = comm_allreduce(c, hr, hs, N, COMM_F32, COMM_AVG);
    rd = comm_allreduce(c, dr, ds, N, COMM_F32, COMM_AVG);
    break;
  case 1:
    rh = comm_reduce_scatter(c, hr, hs, N, COMM_F32, COMM_SUM);
    rd = comm_reduce_scatter(c, dr, ds, N, COMM_F32, COMM_SUM);
    break;
  case 2:
    rh = comm_allgather(c, hr, hs, N, COMM_F32);
    rd = comm_allgather(c, dr, ds, N, COMM_F32);
    break;
  case 3:
    rh = comm_alltoall(c, hr, hs, N, COMM_F32);
    rd = comm_alltoall(c, dr, ds, N, COMM_F32);
    break;
  case 4:
    rh = comm_allgatherv(c, hr, hs, counts, COMM_F32);
    rd = comm_allgatherv(c, dr, ds, counts, COMM_F32);
    break;
  default:
    hr = hs, dr = ds;
    rh = comm_broadcast(c, hs, N, COMM_F32, 0);
    rd = comm_broadcast(c, ds, N, COMM_F32, 0);
  }
  CHECK(rh == 0 && rd == 0, "%s: host %d device %d: %s", what, rh, rd, comm_last_error(c));
  cudaMemcpy(back, dr, N * sizeof(float), cudaMemcpyDeviceToHost);
  CHECK(!memcmp(back, hr, N * sizeof(float)), "%s (inplace=%d): device result differs", what,
        inplace);
  cudaFree(d_in);
  cudaFree(d_out);
  free(h_in), free(h_out), free(back);
}

int main(void) {
  int ndev = 0;
  comm_t *c;
  if (comm_init(&c, NULL)) return 1; /* first, so a bundle's MPI runtime is checked anywhere */
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    comm_destroy(c);
    comm_finalize();
    printf("no GPU: skipped\n");
    return 77;
  }
  const char *names[] = {"allreduce", "reduce_scatter", "allgather", "alltoall", "allgatherv",
                         "broadcast"};
  for (int k = 0; k < 6; k++)
    for (int inplace = 0; inplace < 2; inplace++) compare(c, names[k], k, inplace);
  /* mixed host/device buffers are refused with a message */
  float *d, h[4];
  cudaMalloc((void **)&d, 16);
  int rc = comm_allreduce(c, h, d, 4, COMM_F32, COMM_SUM);
  CHECK(rc == STRATA_ESHAPE && strstr(comm_last_error(c), "send buffer is on the device"),
        "mixed buffers: rc %d '%s'", rc, comm_last_error(c));
  /* the device path through a non-blocking request */
  comm_request_t *req;
  CHECK(comm_iallreduce(c, d, d, 4, COMM_F32, COMM_SUM, &req) == 0 && comm_wait(&req) == 0,
        "iallreduce on device: %s", comm_last_error(c));
  cudaFree(d);
  comm_counter_t k;
  comm_counters(c, COMM_K_ALLREDUCE, &k);
  CHECK(k.calls == 5, "allreduce calls counted %llu, want 5", (unsigned long long)k.calls);
  comm_destroy(c);
  comm_finalize();
  printf("libcomm device path: %s\n", failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
