/* A small full disk for the failure tests, by LD_PRELOAD: a write of n
 * bytes into a file under FULLFS_DIR fails with ENOSPC when the blocks the
 * files there hold, plus n, exceed FULLFS_BYTES (as a file system of that
 * size would, counting an overwrite as new space). fallocate is held to the same budget,
 * unless FULLFS_FALLOCATE=lie, which makes it succeed without holding
 * anything (a file system that cannot reserve space and then runs out in
 * the middle of a write). Everything else passes through.
 *
 * Used where the tests cannot mount a tmpfs; the real disk is the
 * preferred test (tests/lua/failures.sh). */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* 0 when fd's file lies under FULLFS_DIR (*dir is then set), else -1. */
static int watched(int fd, const char **dir) {
  char link[64], path[4096];
  *dir = getenv("FULLFS_DIR");
  if (!*dir || !**dir) return -1;
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return -1;
  path[n] = 0;
  size_t dl = strlen(*dir);
  return strncmp(path, *dir, dl) == 0 && (path[dl] == '/' || path[dl] == 0) ? 0 : -1;
}

static long long used(const char *dir) {
  long long total = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  struct stat sb;
  char p[4096];
  while (d && (e = readdir(d))) {
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (e->d_name[0] != '.' && stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) total += 512LL * sb.st_blocks;
  }
  if (d) closedir(d);
  return total;
}

/* 1 when n more bytes written to fd would not fit (a file unlinked while
 * open, as liboffload's NVMe tier keeps its own, still holds its blocks). */
static int no_room_fd(int fd, const char *dir, off_t n) {
  const char *b = getenv("FULLFS_BYTES");
  long long budget = b ? atoll(b) : 0, extra = 0;
  char link[64], path[4096];
  struct stat sb;
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t k = readlink(link, path, sizeof path - 1);
  if (k > 10 && (path[k] = 0, !strcmp(path + k - 10, " (deleted)")) && fstat(fd, &sb) == 0)
    extra = 512LL * sb.st_blocks;
  return used(dir) + extra + n > budget;
}

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef int (*fallocate_fn)(int, int, off_t, off_t);
#define REAL(name, type)                                                                           \
  static type real_##name;                                                                        \
  if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
  REAL(pwrite64, pwrite_fn);
  const char *dir;
  if (watched(fd, &dir) == 0 && no_room_fd(fd, dir, (off_t)n)) {
    errno = ENOSPC;
    return -1;
  }
  return real_pwrite64(fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { return pwrite64(fd, buf, n, off); }

ssize_t write(int fd, const void *buf, size_t n) {
  REAL(write, write_fn);
  const char *dir;
  if (watched(fd, &dir) == 0 && no_room_fd(fd, dir, (off_t)n)) {
    errno = ENOSPC;
    return -1;
  }
  return real_write(fd, buf, n);
}

int fallocate64(int fd, int mode, off_t off, off_t len) {
  REAL(fallocate64, fallocate_fn);
  const char *dir, *how = getenv("FULLFS_FALLOCATE");
  if (watched(fd, &dir) == 0) {
    if (how && !strcmp(how, "lie")) return 0;
    struct stat sb; /* the blocks the file holds already are no news */
    off_t held = fstat(fd, &sb) == 0 ? 512 * (off_t)sb.st_blocks : 0;
    if (off + len > held && no_room_fd(fd, dir, off + len - held)) {
      errno = ENOSPC;
      return -1;
    }
  }
  return real_fallocate64(fd, mode, off, len);
}

int fallocate(int fd, int mode, off_t off, off_t len) { return fallocate64(fd, mode, off, len); }
