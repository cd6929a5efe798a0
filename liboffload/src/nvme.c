/* The NVMe tier's file: one per manager, unlinked as soon as it is open so
 * that nothing is left behind however the process ends; whole, aligned
 * pread/pwrite transfers, with O_DIRECT (bypassing the page cache, as
 * ZeRO-Infinity does) where the file system takes it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/status.h>

#include "internal.h"

static atomic_int files;

int nvme_open(const char *dir, int *direct, char *err, size_t errlen) {
  char path[4096];
  struct stat st;
  if (!dir || !dir[0] || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "NVMe tier: directory '%s': %s", dir ? dir : "(none)",
             dir && dir[0] ? (errno ? strerror(errno) : "not a directory") : "not given");
    return -1;
  }
  snprintf(path, sizeof path, "%s/strata-offload-%ld-%d.chunks", dir, (long)getpid(), atomic_fetch_add(&files, 1));
  int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, fd = -1;
  if (*direct) {
    fd = open(path, flags | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) *direct = 0; /* tmpfs and others refuse O_DIRECT */
  }
  if (fd < 0 && !*direct) fd = open(path, flags, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "NVMe tier: cannot create '%s': %s", path, strerror(errno));
    return -1;
  }
  unlink(path);
  return fd;
}

static int transfer(int fd, void *buf, size_t n, size_t offset, int writing, char *err, size_t errlen) {
  size_t done = 0;
  while (done < n) {
    ssize_t k = writing ? pwrite(fd, (const char *)buf + done, n - done, (off_t)(offset + done))
                        : pread(fd, (char *)buf + done, n - done, (off_t)(offset + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      snprintf(err, errlen, "NVMe tier: %s %zu bytes at offset %zu: %s", writing ? "writing" : "reading", n, offset,
               k < 0 ? strerror(errno) : "end of file");
      return STRATA_EIO;
    }
    done += (size_t)k;
  }
  return STRATA_OK;
}

int nvme_write(int fd, const void *buf, size_t n, size_t offset, char *err, size_t errlen) {
  return transfer(fd, (void *)buf, n, offset, 1, err, errlen);
}

int nvme_read(int fd, void *buf, size_t n, size_t offset, char *err, size_t errlen) {
  return transfer(fd, buf, n, offset, 0, err, errlen);
}
