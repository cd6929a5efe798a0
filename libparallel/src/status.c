#include <stdio.h>
#include <unistd.h>

#include <strata/parallel.h>

const char *par_strerror(int code) { return strata_status_string(code); }

static par_fatal_fn fatal_fn;
static void *fatal_arg;

void par_set_fatal_handler(par_fatal_fn fn, void *arg) {
  fatal_arg = arg;
  fatal_fn = fn;
}

void par_fatal(const char *msg) {
  if (fatal_fn) fatal_fn(msg, fatal_arg);
  else fprintf(stderr, "strata: %s\n", msg);
  fflush(stderr);
  fflush(stdout);
  _exit(1);
}
