/* liboffload's README example, linked against libstrata_offload alone:
 * a device tier of 2 chunks, a host tier of 2 and an NVMe tier in $TMPDIR;
 * 6 tensors of one chunk written, then read back through every tier. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/offload.h>

int main(void) {
  offload_config_t c = OFFLOAD_CONFIG_DEFAULTS;
  c.chunk_bytes = 1 << 16;
  c.budget[OFFLOAD_DEVICE] = 2 * c.chunk_bytes, c.budget[OFFLOAD_HOST] = 2 * c.chunk_bytes;
  c.budget[OFFLOAD_NVME] = 16 * c.chunk_bytes;
  c.nvme_dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  offload_t *o;
  char err[512];
  if (offload_create(&o, &c, err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  if (offload_note(o)[0]) printf("note: %s\n", offload_note(o));
  int t[6];
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < 6; i++) {
      unsigned char *p;
      if (pass == 0 && offload_tensor_add(o, c.chunk_bytes, &t[i])) goto fail;
      if (offload_access(o, t[i], OFFLOAD_DEVICE, (void **)&p)) goto fail; /* COMPUTE, on the device */
      if (pass == 0) memset(p, i + 1, c.chunk_bytes);
      else if (p[0] != i + 1 || p[c.chunk_bytes - 1] != i + 1) {
        fprintf(stderr, "tensor %d came back changed\n", i);
        return 1;
      }
      if (offload_release(o, t[i], OFFLOAD_HOLD)) goto fail; /* movable again */
    }
  offload_stats_t s;
  offload_stats(o, &s);
  printf("offload consumer: 6 chunks through 2 device and 2 host places; device->host %llu bytes, host->NVMe "
         "%llu, NVMe->device %llu; %llu evictions\n",
         (unsigned long long)s.moved[OFFLOAD_DEVICE][OFFLOAD_HOST], (unsigned long long)s.moved[OFFLOAD_HOST][OFFLOAD_NVME],
         (unsigned long long)s.moved[OFFLOAD_NVME][OFFLOAD_DEVICE], (unsigned long long)s.evictions);
  offload_destroy(o);
  return 0;
fail:
  fprintf(stderr, "%s\n", offload_error(o));
  offload_destroy(o);
  return 1;
}
