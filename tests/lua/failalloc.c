/* Allocation failures for the tests, by LD_PRELOAD: the FAILALLOC_NTH-th
 * allocation (malloc, calloc, realloc, posix_memalign, aligned_alloc,
 * memalign) made by strata's own code fails, as an exhausted heap would;
 * FAILALLOC_FROM=N fails every one from the N-th on (a heap that stays
 * exhausted). Only calls from the main executable count, where strata's
 * libraries and Lua bindings are linked statically: MPI, HDF5, Lua and
 * OpenBLAS are shared libraries whose own out-of-memory handling is theirs.
 * With FAILALLOC_COUNT set, the number of counted allocations is printed on
 * stderr at exit ("failalloc: N allocations"), to size the sweep; with
 * FAILALLOC_TRACE, a backtrace of each failed one. */
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <errno.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static long nth = -1, from = -1, count;
static int ready, counting;
static uintptr_t exe_lo, exe_hi; /* the main executable's loaded segments */

/* The first object dl_iterate_phdr reports is the main program. */
static int find_exe(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size, (void)data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (!exe_lo || lo < exe_lo) exe_lo = lo;
    if (hi > exe_hi) exe_hi = hi;
  }
  return 1; /* stop after the first */
}

__attribute__((constructor)) static void init(void) {
  const char *s = getenv("FAILALLOC_NTH"), *f = getenv("FAILALLOC_FROM");
  if (s) nth = atol(s);
  if (f) from = atol(f);
  counting = getenv("FAILALLOC_COUNT") != NULL;
  dl_iterate_phdr(find_exe, NULL);
  ready = 1;
}

__attribute__((destructor)) static void fini(void) {
  if (counting) {
    char buf[64];
    int n = snprintf(buf, sizeof buf, "failalloc: %ld allocations\n", count);
    if (write(2, buf, (size_t)n) < 0) {
    }
  }
}

/* 1 when the caller lies in the main executable. */
static int from_strata(void *caller) {
  uintptr_t a = (uintptr_t)caller;
  return a >= exe_lo && a < exe_hi;
}

/* 1 when this allocation must fail. */
static int fail_now(void *caller) {
  if (!ready || (nth < 0 && from < 0 && !counting)) return 0;
  if (!from_strata(caller)) return 0;
  long k = ++count;
  int fail = k == nth || (from > 0 && k >= from);
  if (fail && getenv("FAILALLOC_TRACE")) { /* where it failed, for whoever fixes it */
    void *bt[16];
    backtrace_symbols_fd(bt, backtrace(bt, 16), 2);
  }
  return fail;
}

void *malloc(size_t n) {
  if (fail_now(__builtin_return_address(0))) return errno = ENOMEM, NULL;
  return __libc_malloc(n);
}

void *calloc(size_t a, size_t b) {
  if (fail_now(__builtin_return_address(0))) return errno = ENOMEM, NULL;
  return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n) {
  if (fail_now(__builtin_return_address(0))) return errno = ENOMEM, NULL;
  return __libc_realloc(p, n);
}

int posix_memalign(void **out, size_t align, size_t n) {
  if (fail_now(__builtin_return_address(0))) return ENOMEM;
  void *p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

void *aligned_alloc(size_t align, size_t n) {
  if (fail_now(__builtin_return_address(0))) return errno = ENOMEM, NULL;
  return __libc_memalign(align, n);
}

void *memalign(size_t align, size_t n) {
  if (fail_now(__builtin_return_address(0))) return errno = ENOMEM, NULL;
  return __libc_memalign(align, n);
}
