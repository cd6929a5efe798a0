/* The watcher behind io_deadline_*: one thread per watched section, asleep
 * on a condition variable until fed, stopped or out of time. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <strata/parallel.h>

#include "io_internal.h"

struct io_deadline {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  double seconds;
  struct timespec due; /* tv_sec = 0: paused */
  int quit;
  char what[512];
};

static par_fatal_fn stuck_fn;
static void *stuck_arg;

void par_set_fatal_handler(par_fatal_fn fn, void *arg) {
  stuck_arg = arg;
  stuck_fn = fn;
}

static void report_stuck(const char *msg) {
  if (stuck_fn)
    stuck_fn(msg, stuck_arg);
  else
    fprintf(stderr, "strata: %s\n", msg);
  fflush(stderr);
}

static struct timespec after(double s) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  long ns = t.tv_nsec + (long)((s - (double)(long)s) * 1e9);
  t.tv_sec += (time_t)s + ns / 1000000000L;
  t.tv_nsec = ns % 1000000000L;
  return t;
}

static int passed(const struct timespec *due) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > due->tv_sec || (now.tv_sec == due->tv_sec && now.tv_nsec >= due->tv_nsec);
}

/* Seconds since due. */
static double late_by(const struct timespec *due) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - due->tv_sec) + 1e-9 * (double)(now.tv_nsec - due->tv_nsec);
}

/* A watcher woken this long after its due time was not running itself:
 * this process was stopped (SIGSTOP, a suspended job) or starved, so the
 * wait it measured is its own absence, not another rank's. */
#define DEADLINE_LATE_S 0.5

static void *watch(void *arg) {
  io_deadline_t *d = arg;
  pthread_mutex_lock(&d->mu);
  while (!d->quit) {
    if (d->due.tv_sec == 0) {
      pthread_cond_wait(&d->cv, &d->mu);
      continue;
    }
    struct timespec due = d->due;
    pthread_cond_timedwait(&d->cv, &d->mu, &due);
    if (!d->quit && d->due.tv_sec != 0 && passed(&d->due)) {
      if (late_by(&d->due) > DEADLINE_LATE_S) { /* back from a stop: the others get their time again */
        d->due = after(d->seconds);
        continue;
      }
      char msg[800];
      snprintf(msg, sizeof msg,
               "%s did not finish within %g s: another rank never reached this collective step "
               "of parallel HDF5 (it is stopped, stuck or gone), which cannot be interrupted: end "
               "the job",
               d->what, d->seconds);
      d->due.tv_sec = 0; /* once: the call goes on waiting unless the handler ends the process */
      d->quit = 1;
      pthread_mutex_unlock(&d->mu);
      report_stuck(msg);
      return NULL;
    }
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

io_deadline_t *io_deadline_start(double seconds) {
  if (!(seconds > 0)) return NULL;
  io_deadline_t *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, &ca);
  pthread_condattr_destroy(&ca);
  d->seconds = seconds;
  snprintf(d->what, sizeof d->what, "a checkpoint step");
  if (pthread_create(&d->thread, NULL, watch, d) != 0) {
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
    return NULL;
  }
  return d;
}

void io_deadline_feed(io_deadline_t *d, const char *fmt, ...) {
  if (!d) return;
  pthread_mutex_lock(&d->mu);
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->what, sizeof d->what, fmt, ap);
    va_end(ap);
  }
  d->due = after(d->seconds);
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

void io_deadline_pause(io_deadline_t *d) {
  if (!d) return;
  pthread_mutex_lock(&d->mu);
  d->due.tv_sec = 0;
  pthread_mutex_unlock(&d->mu);
}

void io_deadline_stop(io_deadline_t *d) {
  if (!d) return;
  pthread_mutex_lock(&d->mu);
  d->quit = 1;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
  pthread_join(d->thread, NULL);
  pthread_cond_destroy(&d->cv);
  pthread_mutex_destroy(&d->mu);
  free(d);
}
