/* liboffload's internals: the NVMe file (nvme.c) under the chunk manager
 * (offload.c). */
#ifndef STRATA_OFFLOAD_INTERNAL_H
#define STRATA_OFFLOAD_INTERNAL_H

#include <stddef.h>

/* Every buffer and file offset of the tiers is aligned to this (O_DIRECT). */
#define OFFLOAD_ALIGN 4096

/* A new file in dir for the NVMe tier, opened read-write (with O_DIRECT
 * when direct and the file system takes it; *direct says what it got) and
 * unlinked at once. Returns the descriptor, or -1 with the reason in err. */
int nvme_open(const char *dir, int *direct, char *err, size_t errlen);
/* Writes / reads n bytes at offset, whole (partial transfers continued);
 * STRATA_EIO with the reason (a full disk: "No space left on device"). */
int nvme_write(int fd, const void *buf, size_t n, size_t offset, char *err, size_t errlen);
int nvme_read(int fd, void *buf, size_t n, size_t offset, char *err, size_t errlen);

/* cuda/tier.cu (CUDA builds): the device tier's arena in device memory and
 * a copy stream of the manager's; pinned host chunks; asynchronous copies
 * (any direction) and zeroing on that stream; its synchronisation. */
#ifdef __cplusplus
extern "C" {
#endif
int offload_cuda_open(int device, size_t arena_bytes, void **arena, void **stream, char *err, size_t n);
void offload_cuda_close(void *arena, void *stream);
int offload_cuda_host_alloc(void **p, size_t bytes);
void offload_cuda_host_free(void *p);
int offload_cuda_copy(void *dst, const void *src, size_t bytes, void *stream, char *err, size_t n);
int offload_cuda_zero(void *p, size_t bytes, void *stream, char *err, size_t n);
int offload_cuda_sync(void *stream, char *err, size_t n);
#ifdef __cplusplus
}
#endif

#endif
