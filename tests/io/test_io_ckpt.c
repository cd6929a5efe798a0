/* Checkpoints across rank counts: run under mpirun -np 1, 2 and 3.
 *
 *   test_io_ckpt                 every writer size w and reader size r in
 *                                1..np: save with w ranks, load with r ranks,
 *                                values bit-exact; shape/name/config errors;
 *                                truncated and bit-flipped files refused on
 *                                every rank; an abandoned save leaves the old
 *                                checkpoint; a stale .tmp is overwritten.
 *   test_io_ckpt killsave DIR    saves step 1, then dies (SIGKILL) in the
 *                                middle of saving step 2
 *   test_io_ckpt verify DIR      DIR/ckpt.h5 is step 1, complete and exact
 *   test_io_ckpt stuck DIR       rank 0 creates a checkpoint with a 1 s
 *                                timeout, rank 1 never does: the watcher must
 *                                report it within seconds (the handler, as an
 *                                application's, ends the rank: exit 1)
 * Exit status 0 on success; failures print the rank and the check. */
#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/parallel.h>

static int world_rank, world_size, failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", world_rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

typedef struct {
  const char *name;
  int ndim;
  int64_t shape[4];
} arr_t;

/* Shapes that exercise the hyperslab decomposition (ranges starting and
 * ending mid-row in 2-D and 3-D), a 1-element array most ranks do not own,
 * and an array over several 1 MiB chunks. */
static const arr_t arrays[] = {
    {"wte", 2, {37, 19}},
    {"blocks/0/w", 3, {5, 7, 3}},
    {"bias", 1, {1}},
    {"big", 2, {1000, 300}},
    {"opt/m/x", 4, {2, 3, 4, 5}},
};
#define NARR (int)(sizeof arrays / sizeof arrays[0])

static int64_t total(const arr_t *a) {
  int64_t t = 1;
  for (int i = 0; i < a->ndim; i++) t *= a->shape[i];
  return t;
}

/* The value of element i of array k: distinct per array and index. */
static float value(int k, int64_t i) { return (float)sin(0.37 * (double)i + 1.7 * k) + (float)k; }

/* Uneven contiguous partitions: split point j of n at t*j*(j+1)/(n*(n+1)),
 * or the mirror image (so writer and reader ranges differ). */
static void part(int64_t t, int j, int n, int mirror, int64_t *off, int64_t *cnt) {
  int64_t lo, hi;
  if (!mirror) {
    lo = t * j * (j + 1) / ((int64_t)n * (n + 1));
    hi = t * (j + 1) * (j + 2) / ((int64_t)n * (n + 1));
  } else {
    int jj = n - 1 - j;
    lo = t - t * (jj + 1) * (jj + 2) / ((int64_t)n * (n + 1));
    hi = t - t * jj * (jj + 1) / ((int64_t)n * (n + 1));
  }
  *off = lo, *cnt = hi - lo;
}

static int save(const char *path, MPI_Comm comm, int64_t step) {
  int r, n;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &n);
  par_ckpt_t *c = NULL;
  char err[1024] = "";
  int rc = par_ckpt_create(path, comm, 0, &c, err, sizeof err);
  CHECK(rc == STRATA_OK, "create: %s", err);
  if (rc) return rc;
  for (int k = 0; k < NARR; k++) {
    int64_t off, cnt;
    part(total(&arrays[k]), r, n, 0, &off, &cnt);
    float *buf = malloc((size_t)(cnt ? cnt : 1) * sizeof *buf);
    for (int64_t i = 0; i < cnt; i++) buf[i] = value(k, off + i);
    rc = par_ckpt_write(c, arrays[k].name, arrays[k].ndim, arrays[k].shape, off, cnt, buf);
    CHECK(rc == STRATA_OK, "write %s: %s", arrays[k].name, par_ckpt_error(c));
    free(buf);
  }
  int64_t rng[2] = {0x123456789abcdefLL, -5};
  CHECK(par_ckpt_set_i64(c, "step", &step, 1) == STRATA_OK, "%s", par_ckpt_error(c));
  CHECK(par_ckpt_set_i64(c, "rng", rng, 2) == STRATA_OK, "%s", par_ckpt_error(c));
  CHECK(par_ckpt_set_str(c, "model", "layers=2 hidden=64") == STRATA_OK, "%s", par_ckpt_error(c));
  CHECK(par_ckpt_set_str(c, "recipe", "return strata.experiment{}\n") == STRATA_OK, "%s",
        par_ckpt_error(c));
  rc = par_ckpt_commit(c);
  CHECK(rc == STRATA_OK, "commit: %s", par_ckpt_error(c));
  par_ckpt_close(c);
  return rc;
}

/* Loads and checks every array and attribute; returns the first failing status. */
static int load(const char *path, MPI_Comm comm, int64_t want_step, int quiet) {
  int r, n, first = STRATA_OK;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &n);
  par_ckpt_t *c = NULL;
  char err[1024] = "";
  int rc = par_ckpt_open(path, comm, 0, &c, err, sizeof err);
  if (!quiet) CHECK(rc == STRATA_OK, "open: %s", err);
  if (rc) return rc;
  for (int k = 0; k < NARR; k++) {
    int64_t off, cnt;
    part(total(&arrays[k]), r, n, 1, &off, &cnt);
    float *buf = calloc((size_t)(cnt ? cnt : 1), sizeof *buf);
    rc = par_ckpt_read(c, arrays[k].name, arrays[k].ndim, arrays[k].shape, off, cnt, buf);
    if (!quiet) CHECK(rc == STRATA_OK, "read %s: %s", arrays[k].name, par_ckpt_error(c));
    if (rc && !first) first = rc;
    int64_t bad = 0;
    for (int64_t i = 0; rc == STRATA_OK && i < cnt; i++) bad += buf[i] != value(k, off + i);
    CHECK(bad == 0, "%s: %lld of %lld values differ", arrays[k].name, (long long)bad,
          (long long)cnt);
    free(buf);
  }
  if (!first) {
    int64_t step = -1, rng[2] = {0};
    CHECK(par_ckpt_get_i64(c, "step", &step, 1) == STRATA_OK && step == want_step, "step %lld",
          (long long)step);
    CHECK(par_ckpt_get_i64(c, "rng", rng, 2) == STRATA_OK && rng[0] == 0x123456789abcdefLL &&
              rng[1] == -5,
          "rng");
    char *recipe = NULL;
    CHECK(par_ckpt_get_str(c, "recipe", &recipe) == STRATA_OK && recipe &&
              strcmp(recipe, "return strata.experiment{}\n") == 0,
          "recipe '%s'", recipe ? recipe : "(null)");
    free(recipe);
    CHECK(par_ckpt_expect_str(c, "model", "layers=2 hidden=64") == STRATA_OK, "%s",
          par_ckpt_error(c));
  }
  par_ckpt_close(c);
  return first;
}

/* The same status on every rank of comm. */
static void check_uniform(int rc, MPI_Comm comm, const char *what) {
  int lo, hi;
  MPI_Allreduce(&rc, &lo, 1, MPI_INT, MPI_MIN, comm);
  MPI_Allreduce(&rc, &hi, 1, MPI_INT, MPI_MAX, comm);
  CHECK(lo == hi, "%s: ranks disagree (%d vs %d)", what, lo, hi);
}

static void errors(const char *path, MPI_Comm comm) {
  par_ckpt_t *c = NULL;
  char err[1024] = "";
  CHECK(par_ckpt_open(path, comm, 0, &c, err, sizeof err) == STRATA_OK, "%s", err);
  if (!c) return;
  float x[703];
  int64_t wrong[2] = {19, 37};
  int rc = par_ckpt_read(c, "wte", 2, wrong, 0, 1, x);
  CHECK(rc == STRATA_ESHAPE, "rc %d", rc);
  CHECK(strstr(par_ckpt_error(c), "'wte' has shape [37,19], the model expects [19,37]"), "%s",
        par_ckpt_error(c));
  int64_t s1[1] = {4};
  rc = par_ckpt_read(c, "blocks/9/w", 1, s1, 0, 1, x);
  CHECK(rc == STRATA_ENOTFOUND && strstr(par_ckpt_error(c), "no array 'blocks/9/w'"), "%d %s", rc,
        par_ckpt_error(c));
  rc = par_ckpt_expect_str(c, "model", "layers=4 hidden=64");
  CHECK(rc == STRATA_ESHAPE && strstr(par_ckpt_error(c), "model is 'layers=2 hidden=64', expected "
                                                        "'layers=4 hidden=64'"),
        "%d %s", rc, par_ckpt_error(c));
  int64_t v[3];
  rc = par_ckpt_get_i64(c, "rng", v, 3);
  CHECK(rc == STRATA_ESHAPE, "%d %s", rc, par_ckpt_error(c));
  rc = par_ckpt_get_i64(c, "missing", v, 1);
  CHECK(rc == STRATA_ENOTFOUND && strstr(par_ckpt_error(c), "no attribute 'missing'"), "%s",
        par_ckpt_error(c));
  int64_t range_bad = 700;
  rc = par_ckpt_read(c, "wte", 2, arrays[0].shape, range_bad, 10, x);
  CHECK(rc == STRATA_EINVAL && strstr(par_ckpt_error(c), "range [700, 710)"), "%s",
        par_ckpt_error(c));
  par_ckpt_close(c);
  c = NULL;
  rc = par_ckpt_open("/nonexistent/ckpt.h5", comm, 0, &c, err, sizeof err);
  CHECK(rc == STRATA_EIO && c == NULL && strstr(err, "/nonexistent/ckpt.h5"), "%d %s", rc, err);
}

static void copy_file(const char *from, const char *to, long keep, long flip) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  fseek(a, 0, SEEK_END);
  long n = ftell(a);
  fseek(a, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)n);
  CHECK(fread(buf, 1, (size_t)n, a) == (size_t)n, "read %s", from);
  if (flip >= 0) buf[flip] ^= 0x10;
  fwrite(buf, 1, (size_t)(keep >= 0 ? keep : n), b);
  fclose(a);
  fclose(b);
  free(buf);
}

static long file_size(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static void corruption(const char *dir, const char *path) {
  char trunc[300], flip[300], tmp[320];
  snprintf(trunc, sizeof trunc, "%s/trunc.h5", dir);
  snprintf(flip, sizeof flip, "%s/flip.h5", dir);
  long n = file_size(path);
  if (world_rank == 0) {
    copy_file(path, trunc, n / 2, -1);
    /* "big" (1.2 MB of a ~1.25 MB file) holds the middle byte. */
    copy_file(path, flip, -1, n / 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  int rc = load(trunc, MPI_COMM_WORLD, 1, 1);
  CHECK(rc == STRATA_ECORRUPT, "truncated file: status %d", rc);
  check_uniform(rc, MPI_COMM_WORLD, "truncated");
  rc = load(flip, MPI_COMM_WORLD, 1, 1);
  CHECK(rc == STRATA_ECORRUPT, "bit-flipped file: status %d", rc);
  check_uniform(rc, MPI_COMM_WORLD, "bit-flipped");
  /* Error text of the flipped file names the array. */
  par_ckpt_t *c = NULL;
  if (par_ckpt_open(flip, MPI_COMM_WORLD, 0, &c, NULL, 0) == STRATA_OK) {
    float *buf = malloc(300000 * sizeof *buf);
    int64_t off, cnt;
    part(300000, world_rank, world_size, 0, &off, &cnt);
    rc = par_ckpt_read(c, "big", 2, arrays[3].shape, off, cnt, buf);
    CHECK(rc == STRATA_ECORRUPT && strstr(par_ckpt_error(c), "array 'big' failed its checksum"),
          "%d %s", rc, par_ckpt_error(c));
    free(buf);
    par_ckpt_close(c);
  }
  /* A flipped byte in an attribute's value or name: refused as damage (the
   * object header's checksum), not as a missing attribute. */
  char attr[300];
  snprintf(attr, sizeof attr, "%s/attr.h5", dir);
  for (int which = 0; which < 2; which++) {
    const char *needle = which == 0 ? "layers=2 hidden=64" : "recipe";
    long at = -1;
    if (world_rank == 0) {
      FILE *f = fopen(path, "rb");
      unsigned char *b = malloc((size_t)n);
      CHECK(f && fread(b, 1, (size_t)n, f) == (size_t)n, "read %s", path);
      for (long i = 0; i + (long)strlen(needle) <= n && at < 0; i++)
        if (!memcmp(b + i, needle, strlen(needle))) at = i + 1;
      fclose(f), free(b);
      CHECK(at >= 0, "'%s' not found in %s", needle, path);
      copy_file(path, attr, -1, at);
    }
    MPI_Bcast(&at, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    c = NULL;
    char *v = NULL;
    rc = par_ckpt_open(attr, MPI_COMM_WORLD, 0, &c, NULL, 0);
    if (rc == STRATA_OK) {
      rc = which == 0 ? par_ckpt_expect_str(c, "model", "layers=2 hidden=64") : par_ckpt_get_str(c, "recipe", &v);
      CHECK(rc == STRATA_ECORRUPT && strstr(par_ckpt_error(c), "damaged"), "flipped attribute %s: %d %s",
            needle, rc, par_ckpt_error(c));
      free(v);
      par_ckpt_close(c);
    } else {
      CHECK(rc == STRATA_ECORRUPT, "flipped attribute %s: open %d", needle, rc);
    }
    check_uniform(rc, MPI_COMM_WORLD, "flipped attribute");
  }
  /* HDF5's error printing stays the application's: strata turns it off
   * inside its own calls only. */
  H5E_auto2_t func = NULL;
  void *data = NULL;
  H5Eget_auto2(H5E_DEFAULT, &func, &data);
  CHECK(func != NULL, "HDF5's error printing is off after strata's calls on a damaged file");
  /* An abandoned save leaves the checkpoint and removes its .tmp. */
  c = NULL;
  CHECK(par_ckpt_create(path, MPI_COMM_WORLD, 0, &c, NULL, 0) == STRATA_OK, "create");
  float z = 0;
  int64_t one = 1;
  par_ckpt_write(c, "partial", 1, &one, 0, world_rank == 0, &z);
  par_ckpt_close(c);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK(file_size(tmp) < 0, "%s left behind", tmp);
  CHECK(load(path, MPI_COMM_WORLD, 1, 0) == STRATA_OK, "old checkpoint after abandoned save");
  /* A stale .tmp from a killed save is simply overwritten. */
  if (world_rank == 0) copy_file(trunc, tmp, -1, -1);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(save(path, MPI_COMM_WORLD, 2) == STRATA_OK, "save over stale tmp");
  CHECK(load(path, MPI_COMM_WORLD, 2, 0) == STRATA_OK, "load step 2");
  CHECK(file_size(tmp) < 0, "%s left behind after commit", tmp);
}

/* What an application does with a call reported stuck: say so, end the rank. */
static void end_rank(const char *msg, void *arg) {
  (void)arg;
  fprintf(stderr, "strata: %s\n", msg);
  fflush(stderr);
  _exit(1);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  char dir[256] = "", path[300];
  if (argc >= 3) {
    snprintf(dir, sizeof dir, "%s", argv[2]);
  } else {
    if (world_rank == 0) {
      strcpy(dir, "/tmp/strata-ckpt-XXXXXX");
      if (!mkdtemp(dir)) dir[0] = 0;
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  }
  snprintf(path, sizeof path, "%s/ckpt.h5", dir);
  if (argc >= 3 && strcmp(argv[1], "killsave") == 0) {
    save(path, MPI_COMM_WORLD, 1);
    par_ckpt_t *c = NULL;
    par_ckpt_create(path, MPI_COMM_WORLD, 0, &c, NULL, 0);
    int64_t off, cnt;
    part(total(&arrays[3]), world_rank, world_size, 0, &off, &cnt);
    float *buf = calloc((size_t)cnt + 1, sizeof *buf);
    par_ckpt_write(c, "big", 2, arrays[3].shape, off, cnt, buf);
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank == 0) raise(SIGKILL);
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "stuck") == 0) {
    /* HDF5's collective file creation waits inside MPI for rank 1 forever:
     * the watcher must end rank 0 after the timeout. */
    if (world_rank == 1) {
      sleep(30);
      return 0;
    }
    par_set_fatal_handler(end_rank, NULL);
    par_ckpt_t *c = NULL;
    int rc = par_ckpt_create(path, MPI_COMM_WORLD, 1.0, &c, NULL, 0);
    fprintf(stderr, "stuck: par_ckpt_create returned %d without rank 1\n", rc);
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "verify") == 0) {
    int rc = load(path, MPI_COMM_WORLD, 1, 0);
    CHECK(rc == STRATA_OK, "load after killed save: %d", rc);
  } else {
    for (int w = 1; w <= world_size; w++)
      for (int r = 1; r <= world_size; r++) {
        MPI_Comm cw, cr;
        MPI_Comm_split(MPI_COMM_WORLD, world_rank < w, world_rank, &cw);
        MPI_Comm_split(MPI_COMM_WORLD, world_rank < r, world_rank, &cr);
        if (world_rank < w) save(path, cw, 1);
        MPI_Barrier(MPI_COMM_WORLD);
        if (world_rank < r) {
          CHECK(load(path, cr, 1, 0) == STRATA_OK, "saved by %d ranks, loaded by %d", w, r);
          errors(path, cr);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Comm_free(&cw);
        MPI_Comm_free(&cr);
      }
    corruption(dir, path);
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank == 0) {
      char cmd[300];
      snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
      if (system(cmd) != 0) failures++;
    }
  }
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) printf("test_io_ckpt: %d ranks, %d failed checks\n", world_size, all);
  MPI_Finalize();
  return all ? 1 : 0;
}
