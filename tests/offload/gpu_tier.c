/* liboffload's CUDA device tier, on a GPU (`make test-gpu`; exit 77
 * without one): the arena in device memory, pinned host chunks, copies on
 * the manager's stream. Four chunks through a device of two: each written
 * on the device (cudaMemcpy into the pointer the access returns), moved to
 * the host by the others' accesses, read there, brought back by a prefetch
 * on the trace and read on the device: every byte intact; the device tier
 * refuses what does not fit with its message; the stats say CUDA. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/offload.h>

#define CB (1 << 20)

static int fails;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "offload_gpu_tier line %d: ", __LINE__);                                     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("offload_gpu_tier: no CUDA device, skipped\n");
    return 77;
  }
  offload_config_t c = OFFLOAD_CONFIG_DEFAULTS;
  c.budget[OFFLOAD_DEVICE] = 2 * CB, c.budget[OFFLOAD_HOST] = 8 * CB, c.chunk_bytes = CB, c.cuda_device = 0;
  offload_t *o;
  char err[512];
  if (offload_create(&o, &c, err, sizeof err)) {
    fprintf(stderr, "offload_gpu_tier: %s\n", err);
    return 1;
  }
  unsigned char *host = malloc(CB), *back = malloc(CB);
  for (int k = 0, t; k < 4; k++) CHECK(offload_tensor_add(o, CB, &t) == 0 && t == k, "tensor %d", k);
  for (int it = 0; it < 2; it++) {
    for (int k = 0; k < 4; k++) {
      if (it == 1) {
        int started = 0;
        CHECK(offload_prefetch(o, 1, &started) == 0, "prefetch: %s", offload_error(o));
      }
      void *d;
      CHECK(offload_access(o, k, OFFLOAD_DEVICE, &d) == 0, "access %d: %s", k, offload_error(o));
      struct cudaPointerAttributes pa;
      CHECK(cudaPointerGetAttributes(&pa, d) == cudaSuccess && pa.type == cudaMemoryTypeDevice,
            "chunk %d: not device memory", k);
      if (it == 0) {
        memset(host, 0x30 + k, CB);
        host[k * 1000] = (unsigned char)k;
        cudaMemcpy(d, host, CB, cudaMemcpyHostToDevice);
      } else {
        cudaMemcpy(back, d, CB, cudaMemcpyDeviceToHost);
        memset(host, 0x30 + k, CB);
        host[k * 1000] = (unsigned char)k;
        CHECK(!memcmp(back, host, CB), "chunk %d: the bytes changed through the tiers", k);
      }
      offload_release(o, k, OFFLOAD_HOLD);
      unsigned char *h;
      CHECK(offload_access(o, k, OFFLOAD_HOST, (void **)&h) == 0, "host access %d: %s", k, offload_error(o));
      CHECK(h[0] == 0x30 + k && h[k * 1000] == (unsigned char)k, "chunk %d on the host: %d", k, h[0]);
      offload_release(o, k, OFFLOAD_HOLD);
    }
    offload_iteration_end(o);
  }
  offload_stats_t st;
  offload_stats(o, &st);
  CHECK(st.cuda == 1 && st.prefetches == 4, "cuda %d, prefetches %llu", st.cuda, (unsigned long long)st.prefetches);
  CHECK(st.moved[OFFLOAD_DEVICE][OFFLOAD_HOST] == 8ull * CB && st.moved[OFFLOAD_HOST][OFFLOAD_DEVICE] == 4ull * CB,
        "moved down %llu, up %llu", (unsigned long long)st.moved[0][1], (unsigned long long)st.moved[1][0]);
  /* two pinned on a device of two: a third is refused by name */
  offload_access(o, 0, OFFLOAD_DEVICE, NULL), offload_access(o, 1, OFFLOAD_DEVICE, NULL);
  CHECK(offload_access(o, 2, OFFLOAD_DEVICE, NULL) == STRATA_ENOMEM && strstr(offload_error(o), "device tier"),
        "a third chunk on a full device: %s", offload_error(o));
  offload_destroy(o);
  free(host), free(back);
  printf("offload_gpu_tier: %s\n", fails ? "FAILED" : "ok (4 chunks through a CUDA device tier of 2, prefetched)");
  return fails ? 1 : 0;
}
