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

/* A deadline on calls that cannot be interrupted: parallel HDF5's
 * collective steps wait inside MPI for every rank, with no timeout, so a
 * rank stopped between two of them leaves the others there forever. A
 * watcher thread reports it (par_set_fatal_handler's handler, which may end
 * the process) when the watched code has not called io_deadline_feed or
 * io_deadline_stop within `seconds`. A watcher that wakes well after its
 * due time (this process was itself stopped, then continued) gives the
 * others the full time again instead of blaming them. */
typedef struct io_deadline io_deadline_t;
/* NULL (nothing watched) when seconds <= 0 or the thread cannot start. */
io_deadline_t *io_deadline_start(double seconds);
/* Restarts the clock; the text ("checkpoint '/runs/a/checkpoint.h5':
 * creating its .tmp file") names the step in the message if the clock runs
 * out (fmt NULL: the same step goes on). */
void io_deadline_feed(io_deadline_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Pauses the clock (a wait with a timeout of its own). */
void io_deadline_pause(io_deadline_t *d);
void io_deadline_stop(io_deadline_t *d);

#endif
