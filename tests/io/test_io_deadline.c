/* The deadline behind checkpoints' collective steps (libparallel/src/io):
 * a watched call that runs out of time is reported once; a process that was
 * itself stopped through its due time (SIGSTOP, then SIGCONT, as mpirun
 * continues a stopped rank to end it) does not blame the others on waking.
 * The watched process is a child whose stderr is read back. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../libparallel/src/io/io_internal.h"

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* What the child watched with a 0.4 s deadline printed, when the parent
 * stops it for stop_s seconds (0: never) right after it starts. */
static void run_child(double stop_s, char *out, size_t n) {
  int fd[2];
  cr_assert_eq(pipe(fd), 0);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    io_deadline_t *d = io_deadline_start(0.4);
    io_deadline_feed(d, "checkpoint 'x.h5': writing 'w'");
    nap(2.0); /* the call that never returns (here: long enough) */
    _exit(0);
  }
  close(fd[1]);
  nap(0.1);
  if (stop_s > 0) {
    kill(pid, SIGSTOP);
    nap(stop_s);
    kill(pid, SIGCONT);
    nap(0.2); /* the time mpirun's next signal takes to arrive */
    kill(pid, SIGKILL);
  }
  waitpid(pid, NULL, 0);
  ssize_t k = read(fd[0], out, n - 1);
  out[k > 0 ? k : 0] = 0;
  close(fd[0]);
}

Test(deadline, reports_a_call_out_of_time) {
  char out[2048];
  run_child(0, out, sizeof out);
  cr_expect(strstr(out, "strata: checkpoint 'x.h5': writing 'w' did not finish within 0.4 s") != NULL, "'%s'", out);
}

Test(deadline, a_stopped_process_does_not_blame_the_others) {
  char out[2048];
  run_child(1.0, out, sizeof out);
  cr_expect_str_empty(out, "a process stopped through its due time reported: '%s'", out);
}
