/* Helpers shared by the I/O parts of libparallel (internal). */
#ifndef STRATA_PAR_IO_INTERNAL_H
#define STRATA_PAR_IO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Makes the file at path (which exists) hold `bytes` of disk blocks from
 * its start, without changing its size. STRATA_EIO with why = "needs 5.88 MB
 * (5875992 bytes) on its file system, which has 2.81 MB free: No space left
 * on device (errno 28)" when the file system or a quota has no room; where
 * blocks cannot be held (EOPNOTSUPP), only the free space is compared. */
int io_reserve(const char *path, uint64_t bytes, char *why, size_t n);
/* Room for `bytes` more in the file at path: held (io_reserve of its size
 * plus bytes) when it exists; when it does not, checked by holding them in
 * a probe file beside it for a moment. */
int io_room(const char *path, uint64_t bytes, char *why, size_t n);
/* Gives back the blocks held beyond the file's end (all: every block, the
 * file is being abandoned). Best effort. */
void io_release(const char *path, int all);

#endif
