/* liboffload's NVMe tier on a full disk (tests/offload/full_disk.sh gives
 * it a small one): chunks evicted until a write fails; the access that
 * needed it fails with STRATA_EIO naming "No space left on device", every
 * chunk keeps its bytes (the one that could not move stays where it was),
 * and once a chunk on the NVMe tier is given back its slot serves the
 * access that failed. Exit 0 when all holds.
 *   offload_full_disk DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/offload.h>

#define CB 65536
#define N 32

static int fails;
#define CHECK(c, ...) \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      fprintf(stderr, "offload_full_disk: " __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                                        \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  offload_config_t c = OFFLOAD_CONFIG_DEFAULTS;
  c.chunk_bytes = CB, c.budget[OFFLOAD_DEVICE] = CB, c.budget[OFFLOAD_HOST] = CB;
  c.budget[OFFLOAD_NVME] = (size_t)N * CB, c.nvme_dir = argv[1];
  offload_t *o;
  char err[512];
  if (offload_create(&o, &c, err, sizeof err)) {
    fprintf(stderr, "offload_full_disk: %s\n", err);
    return 1;
  }
  int made = 0, failed_at = -1;
  for (int i = 0, t; i < N; i++) offload_tensor_add(o, CB, &t);
  for (int i = 0; i < N && failed_at < 0; i++) {
    unsigned char *p;
    int rc = offload_access(o, i, OFFLOAD_DEVICE, (void **)&p);
    if (rc) {
      CHECK(rc == STRATA_EIO && strstr(offload_error(o), "No space left on device"), "chunk %d: rc %d, '%s'", i, rc,
            offload_error(o));
      failed_at = i;
      break;
    }
    memset(p, i + 1, CB);
    offload_release(o, i, OFFLOAD_HOLD);
    made++;
  }
  CHECK(failed_at > 2, "the disk never filled up, or at once (failed at %d)", failed_at);
  /* every chunk made so far keeps its bytes */
  for (int i = 0; i < made && failed_at > 0; i++) {
    unsigned char *p;
    int rc = offload_access(o, i, OFFLOAD_HOST, (void **)&p);
    if (rc) { /* the way back may need the disk too: then the bytes must still be where they were */
      CHECK(offload_chunk_tier(o, i) >= 0 && strstr(offload_error(o), "No space left"), "chunk %d lost: %s", i,
            offload_error(o));
      continue;
    }
    CHECK(p[0] == i + 1 && p[CB - 1] == i + 1, "chunk %d came back changed", i);
    offload_release(o, i, OFFLOAD_HOLD);
  }
  /* give back the chunks on the disk: their slots serve the access that failed */
  for (int i = 0; i < made; i++)
    if (offload_chunk_tier(o, i) == OFFLOAD_NVME) {
      void *p;
      if (!offload_access(o, i, OFFLOAD_NVME, &p)) offload_release(o, i, OFFLOAD_FREE);
    }
  unsigned char *p;
  int rc = offload_access(o, failed_at, OFFLOAD_DEVICE, (void **)&p);
  /* (a real file system reuses the slots' blocks; fullfs.so counts every overwrite as new space) */
  int reuse = argc > 2 && !strcmp(argv[2], "reuse");
  CHECK(rc == 0 || (!reuse && rc == STRATA_EIO), "after chunks were given back, chunk %d still fails: %s", failed_at,
        offload_error(o));
  offload_stats_t s;
  offload_stats(o, &s);
  printf("offload full disk: writes failed at chunk %d of %d KiB (No space left on device), nothing lost; the "
         "access %s once slots were given back; %llu bytes written to the NVMe tier\n",
         failed_at, CB >> 10, rc ? "still refused (fullfs.so counts overwrites)" : "served",
         (unsigned long long)s.moved[OFFLOAD_HOST][OFFLOAD_NVME]);
  offload_destroy(o);
  return fails ? 1 : 0;
}
