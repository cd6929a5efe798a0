/* Room on disk before HDF5 writes: a write that fails inside HDF5 leaves its
 * file in a state HDF5 cannot close (and, for parallel files, the other
 * ranks inside a collective step), so strata asks the file system for the
 * blocks first, where a failure is still clean. */
#define _GNU_SOURCE /* fallocate */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <strata/status.h>

#include "io_internal.h"

static void human_bytes(char *buf, size_t n, double b) {
  if (b >= 1e9) snprintf(buf, n, "%.2f GB", b / 1e9);
  else if (b >= 1e6) snprintf(buf, n, "%.2f MB", b / 1e6);
  else snprintf(buf, n, "%.1f kB", b / 1e3);
}

int io_reserve(const char *path, uint64_t bytes, char *why, size_t n) {
  char need[32], have[32];
  struct statvfs vs;
  if (why && n) why[0] = 0;
  int fd = open(path, O_WRONLY);
  if (fd < 0) {
    snprintf(why, n, "cannot open '%s' to reserve space: %s", path, strerror(errno));
    return STRATA_EIO;
  }
  /* KEEP_SIZE: the blocks are held, the file's size (which HDF5 reads as
   * its end) does not change. */
  int r = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes), e = r ? errno : 0;
  int have_vfs = fstatvfs(fd, &vs) == 0;
  close(fd);
  if (r == 0) return STRATA_OK;
  double avail = have_vfs ? (double)vs.f_bavail * (double)vs.f_frsize : -1;
  if (e == EOPNOTSUPP || e == ENOSYS) { /* cannot hold blocks: compare with the free space */
    if (avail < 0 || avail >= (double)bytes) return STRATA_OK;
    e = ENOSPC;
  }
  human_bytes(need, sizeof need, (double)bytes);
  human_bytes(have, sizeof have, avail);
  snprintf(why, n, "needs %s (%llu bytes) on its file system, which has %s free: %s (errno %d)",
           need, (unsigned long long)bytes, avail >= 0 ? have : "?", strerror(e), e);
  return STRATA_EIO;
}

int io_room(const char *path, uint64_t bytes, char *why, size_t n) {
  struct stat sb;
  if (stat(path, &sb) == 0) return io_reserve(path, (uint64_t)sb.st_size + bytes, why, n);
  /* A file to be created: a probe beside it holds the bytes for a moment. */
  char probe[4200];
  snprintf(probe, sizeof probe, "%s.room-XXXXXX", path);
  int fd = mkstemp(probe);
  if (fd < 0) {
    snprintf(why, n, "cannot create a file beside '%s': %s", path, strerror(errno));
    return STRATA_EIO;
  }
  close(fd);
  int rc = io_reserve(probe, bytes, why, n);
  unlink(probe);
  return rc;
}

void io_release(const char *path, int all) {
  struct stat sb;
  if (stat(path, &sb) != 0) return;
  if (truncate(path, all ? 0 : sb.st_size) != 0) { /* best effort */
  }
}
