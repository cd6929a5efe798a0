/* How `strata run` ends when something outside the recipe goes wrong: a
 * rank killed or crashed, a signal asking the run to stop, the launcher
 * interrupted. Three pieces, all in the executable (the libraries install
 * no signal handlers and start no processes):
 *
 *   the guard     every rank of a run is two processes: the guard forks the
 *                 worker (which runs the recipe) and waits for it. When the
 *                 worker dies by a signal, or exits non-zero without having
 *                 printed an error, the guard prints one line naming the
 *                 rank, the signal or status, the step reached, the last
 *                 complete checkpoint and the command that resumes, and
 *                 exits with the worker's status (mpirun then ends the job).
 *                 The two share one page: the worker writes its progress.
 *   stop signals  SIGINT, SIGTERM, SIGHUP and SIGUSR1 set the worker's stop
 *                 flag; the engine finishes the step, saves a checkpoint
 *                 and the run exits with STRATA_EXIT_STOPPED. A second one
 *                 stops the worker at once.
 *   the launcher  `strata run -n N` runs mpirun in its own process group,
 *                 so that Ctrl-C reaches the launcher only (mpirun would end
 *                 the job at once, and drop the ranks' last words): each
 *                 interrupt is sent on as SIGUSR1, which mpirun forwards to
 *                 every rank. */
#define _GNU_SOURCE /* sigabbrev_np */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "strata_lua.h"

/* ------------------------------------------------------------ status */

static lstrata_status_t local_status = {.ckpt_step = -1};
static lstrata_status_t *status = &local_status;

lstrata_status_t *lstrata_status(void) { return status; }

/* ------------------------------------------------------------ the command */

static const char *cmd_self = "strata";
static char **cmd_args; /* the recipe and its overrides */
static int cmd_nargs;

void lstrata_set_command(const char *self, char **args, int nargs) {
  const char *s = getenv("STRATA_SELF"); /* the name the launcher was called by */
  cmd_self = s && *s ? s : self;
  cmd_args = args;
  cmd_nargs = nargs;
}

/* Appends s to buf, single-quoted when the shell would otherwise read it
 * differently. */
static size_t put_word(char *buf, size_t n, size_t k, const char *s) {
  int plain = *s != 0;
  for (const char *p = s; *p; p++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%", *p))
      plain = 0;
  if (k + 1 < n && k > 0) buf[k++] = ' ';
  if (plain) {
    k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s", s);
  } else {
    if (k < n) buf[k++] = '\'';
    for (const char *p = s; *p; p++) {
      if (*p == '\'') k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "'\\''");
      else if (k < n) buf[k++] = *p;
    }
    if (k < n) buf[k++] = '\'';
  }
  if (k < n) buf[k] = 0;
  else if (n) buf[n - 1] = 0;
  return k;
}

void lstrata_resume_command(char *buf, size_t n, const char *ckpt) {
  char ranks[16], over[1200];
  size_t k = 0;
  const char *launched = getenv("STRATA_LAUNCH_N");
  const char *size = getenv("OMPI_COMM_WORLD_SIZE");
  if (!size) size = getenv("PMI_SIZE");
  buf[0] = 0;
  if (launched || !size || atoi(size) <= 1) {
    k = put_word(buf, n, k, cmd_self);
    k = put_word(buf, n, k, "run");
    if (launched && atoi(launched) > 1) {
      k = put_word(buf, n, k, "-n");
      k = put_word(buf, n, k, launched);
    }
    const char *hosts = getenv("STRATA_LAUNCH_HOSTFILE");
    if (launched && hosts && *hosts) {
      k = put_word(buf, n, k, "--hostfile");
      k = put_word(buf, n, k, hosts);
    }
  } else {
    snprintf(ranks, sizeof ranks, "%d", atoi(size));
    k = put_word(buf, n, k, "mpirun");
    k = put_word(buf, n, k, "-np");
    k = put_word(buf, n, k, ranks);
    k = put_word(buf, n, k, cmd_self);
    k = put_word(buf, n, k, "run");
  }
  /* A resume continues the run in place (overwrite=true would contradict
   * it); starting again once training has begun (its metrics file is there)
   * must overwrite, or the runner refuses to start over the run. */
  int started = status->steps > 0;
  for (int i = 0; i < cmd_nargs; i++)
    if (strncmp(cmd_args[i], "train.resume=", 13) != 0 &&
        !((ckpt || started) && strncmp(cmd_args[i], "overwrite=", 10) == 0))
      k = put_word(buf, n, k, cmd_args[i]);
  if (ckpt) {
    snprintf(over, sizeof over, "train.resume=%s", ckpt);
    put_word(buf, n, k, over);
  } else if (started) {
    put_word(buf, n, k, "overwrite=true");
  }
}

void lstrata_checkpoint_hint(char *buf, size_t n) {
  char cmd[2048];
  int w;
  if (status->ckpt_step >= 0 && status->ckpt_path[0]) {
    lstrata_resume_command(cmd, sizeof cmd, status->ckpt_path);
    w = snprintf(buf, n, "last complete checkpoint: %s (step %ld); resume with: %s",
                 status->ckpt_path, status->ckpt_step, cmd);
  } else {
    lstrata_resume_command(cmd, sizeof cmd, NULL);
    w = snprintf(buf, n, "no checkpoint was written; start again with: %s", cmd);
  }
  if (w < 0 || (size_t)w >= n) buf[n - 1] = 0; /* cut: the message stays one line */
}

/* ------------------------------------------------------------ stop signals */

static volatile sig_atomic_t stop_flag;
/* Only a run without mpirun announces the stop from its handler: under
 * mpirun a SIGTERM may be mpirun ending the job after another rank died,
 * and the launcher announces interrupts itself. */
static int stop_quiet;

volatile sig_atomic_t *lstrata_stop_flag(void) { return &stop_flag; }

/* The ranks' records under strata run -n (STRATA_ELASTIC_FILE), read from on_stop. */
static char elastic_file[4200];

/* 1 when the elastic records hold a rank's failure (async-signal-safe). */
static int failure_recorded(void) {
  static char text[16384];
  static const char key[] = "\nfailure=";
  if (!elastic_file[0]) return 0;
  int fd = open(elastic_file, O_RDONLY);
  if (fd < 0) return 0;
  ssize_t n = read(fd, text, sizeof text);
  close(fd);
  for (ssize_t i = 0; i + (ssize_t)sizeof key - 1 <= n; i++) {
    size_t k = 0;
    while (k < sizeof key - 1 && text[i + (ssize_t)k] == key[k]) k++;
    if (k == sizeof key - 1) return 1;
  }
  return 0;
}

static void on_stop(int sig) {
  static const char msg[] =
      "\nstrata: stopping after this step and saving a checkpoint (interrupt again to stop at once)\n";
  /* mpirun ending the job after a rank's failure (recorded by its guard
   * under strata run -n): the job is lost, its last checkpoint on disk, so
   * this rank ends now rather than after its step (an elastic relaunch
   * starts that much sooner). */
  if (sig == SIGTERM && failure_recorded()) {
    status->reported = 1; /* (its guard stays silent) */
    _exit(STRATA_EXIT_FAIL);
  }
  if (stop_flag) { /* the second: at once, as if not caught */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  stop_flag = sig;
  if (!stop_quiet) {
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
  }
}

static volatile sig_atomic_t continued; /* this process was stopped and woken (SIGCONT) */
static void on_cont(int sig) {
  (void)sig;
  continued = 1;
}

int lstrata_was_continued(void) { return continued; }

void lstrata_catch_stop_signals(int rank) {
  struct sigaction sc;
  memset(&sc, 0, sizeof sc);
  sc.sa_handler = on_cont;
  sc.sa_flags = SA_RESTART;
  sigemptyset(&sc.sa_mask);
  sigaction(SIGCONT, &sc, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  stop_quiet = rank != 0 || getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE");
  const char *ef = getenv("STRATA_ELASTIC_FILE");
  snprintf(elastic_file, sizeof elastic_file, "%s", ef ? ef : "");
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaction(sigs[i], &sa, NULL);
}

/* ------------------------------------------------------------ elastic runs */

/* Under `strata run -n N` the launcher names a file (STRATA_ELASTIC_FILE)
 * where a failing rank records what happened and its last complete
 * checkpoint, key=value lines that an elastic run's launcher reads to
 * relaunch (lstrata_elastic_next). One write, appended: ranks may fail
 * together. */
/* One write, appended (lines from several ranks never interleave). */
void lstrata_elastic_append(const char *lines) {
  const char *f = getenv("STRATA_ELASTIC_FILE");
  int fd = f && *f ? open(f, O_WRONLY | O_APPEND | O_CREAT, 0600) : -1;
  if (fd < 0) return;
  if (write(fd, lines, strlen(lines)) < 0) {
  }
  close(fd);
}

/* Appends `head`, this rank's machine and its last complete checkpoint. */
static void elastic_write(const char *head) {
  char buf[4700], node[256];
  lstrata_this_node(node, sizeof node);
  snprintf(buf, sizeof buf, "%s\nnode=%s\nckpt_step=%ld\nckpt=%s\n", head, node, status->ckpt_step,
           status->ckpt_path);
  lstrata_elastic_append(buf);
}

static void elastic_record(const char *what) {
  char head[2600];
  snprintf(head, sizeof head, "failure=%s\nstep=%ld", what, status->step);
  elastic_write(head);
}

void lstrata_elastic_failure(const char *what) { elastic_record(what); }

void lstrata_elastic_grow(int ranks) {
  char head[32];
  snprintf(head, sizeof head, "grow=%d", ranks);
  elastic_write(head);
}

/* The value of `key` in the file's key=value lines (the last one), or "". */
static void elastic_value(const char *text, const char *key, char *out, size_t n) {
  out[0] = 0;
  size_t kl = strlen(key);
  for (const char *l = text; l && *l;) {
    const char *e = strchr(l, '\n');
    size_t len = e ? (size_t)(e - l) : strlen(l);
    if (len > kl && !strncmp(l, key, kl) && l[kl] == '=') {
      size_t v = len - kl - 1 < n - 1 ? len - kl - 1 : n - 1;
      memcpy(out, l + kl + 1, v), out[v] = 0;
    }
    l = e ? e + 1 : NULL;
  }
}

/* ------------------------------------------------------------ fatal ends */

/* A call libparallel reports stuck for good (a collective step of parallel
 * HDF5 that another rank never reaches): one line with the step and the
 * way back, as for every other failure of a run, and the end of this rank
 * (mpirun then ends the others). */
static void on_fatal(const char *msg, void *arg) {
  (void)arg;
  /* Under mpirun, a rank that was stopped (SIGSTOP) and woken again (by
   * mpirun ending the job once another rank reported the stuck step, or by
   * hand) finds the next collective step stuck in its turn: the others have
   * reported it, so this rank ends quietly instead of printing the same
   * line again. So does one that mpirun is ending (SIGTERM). */
  if ((continued || stop_flag == SIGTERM) && stop_quiet) {
    status->reported = 1; /* (and its guard too) */
    _exit(STRATA_EXIT_FAIL);
  }
  char hint[2400];
  lstrata_checkpoint_hint(hint, sizeof hint);
  if (status->steps > 0)
    fprintf(stderr, "strata: %s; after step %ld; %s\n", msg, status->step, hint);
  else
    fprintf(stderr, "strata: %s\n", msg);
  elastic_record(msg);
  status->reported = 1;
  fflush(stderr);
  fflush(stdout);
  _exit(STRATA_EXIT_FAIL);
}

void lstrata_catch_fatal_ends(void) { par_set_fatal_handler(on_fatal, NULL); }

/* ------------------------------------------------------------ the guard */

static volatile sig_atomic_t outside; /* a signal reached the guard: the run is being ended */

static void on_outside(int sig) { outside = sig; }

static const char *signal_cause(int sig) {
  switch (sig) {
  case SIGKILL: return "killed by a user, the scheduler or the out-of-memory killer (see dmesg)";
  case SIGSEGV:
  case SIGBUS:
  case SIGILL:
  case SIGFPE:
  case SIGABRT: return "a crash";
  default: return strsignal(sig);
  }
}

/* The guard's line for a worker that ended without a word of its own. */
static void report_death(int rank, int ranks, int wstatus) {
  char what[160], where[160], hint[2400];
  const char *who = ranks > 1 ? "rank" : "the run";
  char whos[48];
  if (ranks > 1) snprintf(whos, sizeof whos, "rank %d of %d", rank, ranks);
  else snprintf(whos, sizeof whos, "%s", who);
  if (WIFSIGNALED(wstatus)) {
    int sig = WTERMSIG(wstatus);
    const char *abbrev = sigabbrev_np(sig);
    snprintf(what, sizeof what, "was killed by signal %d (SIG%s: %s)", sig, abbrev ? abbrev : "?",
             signal_cause(sig));
  } else {
    snprintf(what, sizeof what,
             "exited with status %d without an error message (os.exit in the recipe?)",
             WEXITSTATUS(wstatus));
  }
  if (status->steps > 0)
    snprintf(where, sizeof where, "at step %ld of %ld", status->step, status->steps);
  else snprintf(where, sizeof where, "before training started");
  lstrata_checkpoint_hint(hint, sizeof hint);
  fprintf(stderr, "strata: %s %s %s; %s\n", whos, what, where, hint);
  fflush(stderr);
  char failure[400];
  snprintf(failure, sizeof failure, "%s %s %s", whos, what, where);
  elastic_record(failure);
}

/* Open MPI's shared-memory transport prints this when it reads from a
 * rank that has just died ("[host:pid] Read -1, expected 87936, errno =
 * 3"): noise beside the guard's own line, which says what happened. */
static int mpi_noise(const char *line) {
  const char *r = strstr(line, "] Read -1, expected ");
  return line[0] == '[' && r && strstr(r, "errno = ");
}

/* Copies the worker's stderr (fd) to the guard's, a line at a time,
 * dropping mpi_noise, until the worker closes it (exits). */
static void relay_stderr(int fd) {
  char buf[1 << 16];
  size_t have = 0;
  for (;;) {
    ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += (size_t)n;
    buf[have] = 0;
    char *start = buf, *nl;
    while ((nl = memchr(start, '\n', have - (size_t)(start - buf)))) {
      *nl = 0;
      if (!mpi_noise(start)) fprintf(stderr, "%s\n", start);
      start = nl + 1;
    }
    have -= (size_t)(start - buf);
    memmove(buf, start, have);
    if (have == sizeof buf - 1) { /* a line too long to hold: pass it on as is */
      fwrite(buf, 1, have, stderr);
      have = 0;
    }
    fflush(stderr);
  }
  if (have) fwrite(buf, 1, have, stderr);
  fflush(stderr);
}

int lstrata_guarded(int (*work)(void *), void *arg, int rank, int ranks) {
  lstrata_status_t *page = mmap(NULL, sizeof *page, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return work(arg); /* unguarded, as before */
  memset(page, 0, sizeof *page);
  page->ckpt_step = -1;
  status = page;
  /* Under mpirun (never a terminal there) the worker's stderr passes
   * through the guard, which drops Open MPI's noise about dead peers. */
  int relay[2] = {-1, -1};
  if (ranks > 1 && pipe(relay) != 0) relay[0] = relay[1] = -1;
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid(), pid = fork();
  if (pid < 0) return work(arg);
  if (pid == 0) {
    /* The worker dies with its guard (killed by mpirun or by hand). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(STRATA_EXIT_FAIL);
    if (relay[1] >= 0) {
      dup2(relay[1], STDERR_FILENO);
      close(relay[0]);
      close(relay[1]);
    }
    return work(arg);
  }
  /* The guard takes no part in stopping: signals reach the worker too (the
   * same process group); one reaching the guard means the run is being
   * ended from outside, and the worker's death is then no news. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_outside;
  sigemptyset(&sa.sa_mask);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGPIPE};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaction(sigs[i], &sa, NULL);
  if (relay[0] >= 0) {
    close(relay[1]);
    relay_stderr(relay[0]);
    close(relay[0]);
  }
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0)
    if (errno != EINTR) return STRATA_EXIT_FAIL;
  if (WIFEXITED(ws) && (WEXITSTATUS(ws) == 0 || page->reported)) return WEXITSTATUS(ws);
  /* A closed pipe (`strata run ... | head`) is the reader's doing, not news. */
  if (!outside && !(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGPIPE)) report_death(rank, ranks, ws);
  return WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : WEXITSTATUS(ws);
}

/* ------------------------------------------------------------ the launcher */

static volatile sig_atomic_t interrupts, first_interrupt;
static void on_interrupt(int sig) {
  if (!interrupts++) first_interrupt = sig;
}

int lstrata_launch(char **av) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaction(sigs[i], &sa, NULL);
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid(), pid = fork();
  if (pid < 0) {
    fprintf(stderr, "strata run: cannot start mpirun: %s\n", strerror(errno));
    return STRATA_EXIT_FAIL;
  }
  if (pid == 0) {
    setpgid(0, 0);                    /* Ctrl-C reaches the launcher only */
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* mpirun ends the job if the launcher dies */
    if (getppid() != parent) _exit(STRATA_EXIT_FAIL);
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], SIG_DFL);
    execvp("mpirun", av);
    fprintf(stderr, "strata run: cannot start mpirun: %s\n", strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  int ws = 0, sent = 0;
  for (;;) {
    if (waitpid(pid, &ws, 0) == pid) break;
    if (errno != EINTR) return STRATA_EXIT_FAIL;
    /* mpirun forwards SIGUSR1 to every rank: the first stops after the
     * step, the second at once (SIGTERM would make mpirun end the job
     * itself, and Open MPI 4.1's mpirun crashes when that meets the end of
     * a job already under way); a third ends mpirun. */
    while (sent < interrupts) {
      if (++sent == 1)
        fprintf(stderr, "\nstrata: stopping after this step and saving a checkpoint (interrupt "
                        "again to stop at once)\n");
      else if (sent == 2)
        fprintf(stderr, "\nstrata: stopping at once; this step is not saved\n");
      kill(pid, sent <= 2 ? SIGUSR1 : SIGTERM);
    }
  }
  if (interrupts >= 2) return 128 + first_interrupt; /* stopped at once, as by the signal */
  if (WIFSIGNALED(ws)) return 128 + WTERMSIG(ws);
  return WEXITSTATUS(ws);
}

static const char *bytes_text(char *buf, double bytes) {
  snprintf(buf, 24, bytes >= 1e9 ? "%.1f GB" : "%.1f MB", bytes >= 1e9 ? bytes / 1e9 : bytes / 1e6);
  return buf;
}

int lstrata_elastic_next(const char *file, int status_code, int np, int restarts, int warm_done,
                         lstrata_hosts_t *hs, char *ckpt, size_t ckpt_n, long *global_batch) {
  if (status_code == 0 || status_code == 2 || interrupts) return 0; /* done, bad input, stopped by the user */
  FILE *f = fopen(file, "r");
  if (!f) return 0;
  char text[16384];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  char v[4200], failure[2400], node[256], place[1024] = "";
  elastic_value(text, "min_ranks", v, sizeof v);
  if (!v[0]) return 0; /* not an elastic run */
  long min_ranks = atol(v), max_restarts, batch, model_ranks, ckpt_step, step;
  elastic_value(text, "max_restarts", v, sizeof v), max_restarts = atol(v);
  elastic_value(text, "global_batch", v, sizeof v), *global_batch = atol(v);
  elastic_value(text, "batch", v, sizeof v), batch = atol(v);
  elastic_value(text, "model_ranks", v, sizeof v), model_ranks = atol(v);
  elastic_value(text, "batch_start", v, sizeof v);
  long start = warm_done ? 0 : atol(v); /* a batch warm-up still to run starts on whole microbatches too */
  elastic_value(text, "failure", failure, sizeof failure);
  elastic_value(text, "ckpt_step", v, sizeof v), ckpt_step = v[0] ? atol(v) : -1;
  elastic_value(text, "step", v, sizeof v), step = atol(v);
  elastic_value(text, "ckpt", ckpt, ckpt_n);
  elastic_value(text, "grow", v, sizeof v);
  long grow = atol(v);
  elastic_value(text, "node", node, sizeof node);
  if (grow > 0 && status_code == STRATA_EXIT_STOPPED && ckpt_step >= 0 && ckpt[0]) { /* stopped to grow */
    if (hs->n) lstrata_hosts_place(hs, (int)grow, place, sizeof place);
    fprintf(stderr,
            "strata: elastic: relaunching on %ld ranks%s%s (data-parallel %ld -> %ld, %ld microbatch%s a step, global "
            "batch %ld) from the checkpoint of step %ld\n",
            grow, place[0] ? " over " : "", place, (long)np / model_ranks, grow / model_ranks,
            *global_batch / (grow / model_ranks * batch), *global_batch / (grow / model_ranks * batch) == 1 ? "" : "es",
            *global_batch, ckpt_step);
    return (int)grow;
  }
  if (!failure[0]) return 0; /* ended without a rank's failure: nothing to relaunch from */
  if (ckpt_step < 0 || !ckpt[0]) {
    fprintf(stderr, "strata: elastic: no checkpoint was written before the failure; not relaunching\n");
    return 0;
  }
  if (restarts >= max_restarts) {
    fprintf(stderr, "strata: elastic: %d relaunch%s already (elastic.max_restarts = %ld); not relaunching\n", restarts,
            restarts == 1 ? "" : "es", max_restarts);
    return 0;
  }
  /* The failed rank's place is lost (its slot on its machine): the largest
   * layout of the others with the same tensor, pipeline and sequence
   * degrees whose data-parallel microbatches divide the global batch, so
   * that the step, its batch and its learning rate stay what they were. */
  if (hs->total) lstrata_hosts_drop(hs, node);
  long top = np - 1;
  if (hs->total && hs->total < top) top = hs->total;
  /* ... and that the planner says fits (the ranks' records: its bytes per
   * rank for each count, and a rank's memory: the device's, else the
   * node's shared by the ranks placed on the busiest machine) */
  elastic_value(text, "device_bytes", v, sizeof v);
  double device_bytes = atof(v), need = 0, have = 0;
  elastic_value(text, "node_bytes", v, sizeof v);
  double node_bytes = atof(v);
  char unfit[192] = "", b1[24], b2[24];
  for (long n = top; n >= min_ranks && n >= model_ranks; n--) {
    long dp = n / model_ranks;
    if (n % model_ranks || *global_batch % (dp * batch) || (start > 0 && start % (dp * batch))) continue;
    char key[32];
    snprintf(key, sizeof key, "need_%ld", n);
    elastic_value(text, key, v, sizeof v);
    need = atof(v);
    have = device_bytes > 0 ? device_bytes : node_bytes > 0 ? node_bytes / lstrata_hosts_busiest(hs, (int)n) : 0;
    if (need > 0 && have > 0 && need > have) {
      if (!unfit[0])
        snprintf(unfit, sizeof unfit, " (on %ld rank%s the planner's %s per rank, of %s: %s)", n, n == 1 ? "" : "s",
                 bytes_text(b1, need), bytes_text(b2, have), device_bytes > 0 ? "offload.device_mb" : "the node's memory");
      continue;
    }
    struct stat sb; /* the time lost: since the checkpoint was saved (the steps after it are redone) */
    double lost = stat(ckpt, &sb) == 0 ? difftime(time(NULL), sb.st_mtime) : 0;
    if (hs->n) lstrata_hosts_place(hs, (int)n, place, sizeof place);
    char planned[96] = "";
    if (need > 0 && have > 0)
      snprintf(planned, sizeof planned, ", the planner's %s per rank of %s", bytes_text(b1, need), bytes_text(b2, have));
    fprintf(stderr,
            "strata: elastic: %s%s%s; relaunching on %ld rank%s%s%s (data-parallel %ld -> %ld, %ld microbatches a step, "
            "global batch %ld%s) from the checkpoint of step %ld, %ld step%s to redo (%.0f s lost)\n",
            failure, hs->n && node[0] ? " on " : "", hs->n ? node : "", n, n == 1 ? "" : "s", place[0] ? " over " : "",
            place, (long)np / model_ranks, dp, *global_batch / (dp * batch), *global_batch, planned, ckpt_step,
            step - ckpt_step, step - ckpt_step == 1 ? "" : "s", lost);
    return (int)n;
  }
  fprintf(stderr, "strata: elastic: no layout of %ld rank%s or fewer (elastic.min_ranks = %ld, tp x pp x sp = %ld%s%s) "
                  "divides the global batch %ld into microbatches of %ld%s%s; not relaunching\n",
          top, top == 1 ? "" : "s", min_ranks, model_ranks, hs->total ? ", slots left in " : "", hs->total ? hs->source : "",
          *global_batch, batch, unfit[0] ? " and fits" : "", unfit);
  return 0;
}
