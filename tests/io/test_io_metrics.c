/* Metrics files: rows appended, read back by strata and by h5dump. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/parallel.h>

static char mdir[64];
static void setup(void) {
  strcpy(mdir, "/tmp/strata-metrics-XXXXXX");
  cr_assert_not_null(mkdtemp(mdir));
}
static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", mdir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(metrics, .init = setup, .fini = teardown);

static const char *names[] = {"step", "loss", "val_loss"};

Test(metrics, rows_round_trip) {
  char path[128], err[512] = "";
  snprintf(path, sizeof path, "%s/m.h5", mdir);
  par_metrics_t *m = NULL;
  cr_assert_eq(par_metrics_create(path, names, 3, &m, err, sizeof err), STRATA_OK, "%s", err);
  cr_assert_eq(par_metrics_set_attr(m, "recipe", "strata.experiment{ train = { steps = 5 } }"),
               STRATA_OK, "%s", par_metrics_error(m));
  /* 2500 rows in uneven appends cross the 1024-row chunks. */
  int n = 0;
  for (int a = 1; n < 2500; a = a * 3 % 17 + 1) {
    double rows[17][3];
    int k = n + a > 2500 ? 2500 - n : a;
    for (int r = 0; r < k; r++) {
      rows[r][0] = n + r;
      rows[r][1] = 5.0 / (1 + n + r);
      rows[r][2] = (n + r) % 100 == 0 ? 0.25 * (n + r) : NAN;
    }
    cr_assert_eq(par_metrics_append(m, &rows[0][0], k), STRATA_OK, "%s", par_metrics_error(m));
    n += k;
  }
  /* A large attribute (over HDF5's 64 KiB compact limit) and a replacement. */
  char *big = malloc(100001);
  memset(big, 'x', 100000);
  big[100000] = 0;
  cr_assert_eq(par_metrics_set_attr(m, "recipe", big), STRATA_OK, "%s", par_metrics_error(m));
  free(big);
  double *v = NULL;
  size_t len = 0;
  cr_assert_eq(par_metrics_read(path, "loss", &v, &len, err, sizeof err), STRATA_OK, "%s", err);
  cr_assert_eq(len, 2500);
  for (int i = 0; i < 2500; i++) cr_assert_eq(v[i], 5.0 / (1 + i), "row %d", i);
  free(v);
  cr_assert_eq(par_metrics_read(path, "val_loss", &v, &len, err, sizeof err), STRATA_OK);
  for (int i = 0; i < 2500; i++)
    if (i % 100 == 0) cr_assert_eq(v[i], 0.25 * i);
    else cr_assert(isnan(v[i]), "row %d: %g", i, v[i]);
  free(v);
  char **list = NULL;
  int count = 0;
  cr_assert_eq(par_metrics_names(path, &list, &count, err, sizeof err), STRATA_OK, "%s", err);
  cr_assert_eq(count, 3);
  int seen = 0;
  for (int i = 0; i < count; i++) {
    for (int j = 0; j < 3; j++) seen += strcmp(list[i], names[j]) == 0;
    free(list[i]);
  }
  free(list);
  cr_assert_eq(seen, 3);
  cr_assert_eq(par_metrics_read(path, "grad_norm", &v, &len, err, sizeof err), STRATA_ENOTFOUND);
  cr_assert_not_null(strstr(err, "no metric named 'grad_norm'"), "%s", err);
  par_metrics_destroy(m);
}

/* While the writer still holds its handle, an independent reader (h5dump)
 * sees every row appended so far. */
Test(metrics, h5dump_reads_mid_run) {
  char path[128], cmd[300];
  snprintf(path, sizeof path, "%s/live.h5", mdir);
  par_metrics_t *m = NULL;
  cr_assert_eq(par_metrics_create(path, names, 3, &m, NULL, 0), STRATA_OK);
  double row[3] = {7, 1.5, 2.75};
  cr_assert_eq(par_metrics_append(m, row, 1), STRATA_OK);
  cr_assert_eq(par_metrics_set_attr(m, "seed", "42"), STRATA_OK);
  snprintf(cmd, sizeof cmd, "h5dump -d /val_loss -a /seed %s > %s/dump.txt 2>&1", path, mdir);
  cr_assert_eq(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "grep -q '(0): 2.75' %s/dump.txt && grep -q '\"42\"' %s/dump.txt",
           mdir, mdir);
  cr_assert_eq(system(cmd), 0, "h5dump output lacks the row or the attribute");
  par_metrics_destroy(m);
}

Test(metrics, bad_input) {
  char path[128], err[512] = "";
  par_metrics_t *m = NULL;
  snprintf(path, sizeof path, "%s/bad.h5", mdir);
  const char *dup[] = {"loss", "loss"};
  cr_assert_eq(par_metrics_create(path, dup, 2, &m, err, sizeof err), STRATA_EINVAL);
  cr_assert_not_null(strstr(err, "'loss' named twice"), "%s", err);
  const char *slash[] = {"a/b"};
  cr_assert_eq(par_metrics_create(path, slash, 1, &m, err, sizeof err), STRATA_EINVAL);
  cr_assert_not_null(strstr(err, "bad metric name 'a/b'"), "%s", err);
  cr_assert_eq(par_metrics_create("/nonexistent/dir/m.h5", names, 3, &m, err, sizeof err),
               STRATA_EIO);
  cr_assert_not_null(strstr(err, "/nonexistent/dir/m.h5"), "%s", err);
  cr_assert_null(m);
  double *v;
  size_t n;
  cr_assert_eq(par_metrics_read("/nonexistent.h5", "loss", &v, &n, err, sizeof err), STRATA_EIO);
  FILE *f = fopen(path, "w");
  fputs("not hdf5 at all", f);
  fclose(f);
  cr_assert_eq(par_metrics_read(path, "loss", &v, &n, err, sizeof err), STRATA_ECORRUPT);
  cr_assert_not_null(strstr(err, "not a readable HDF5 file"), "%s", err);
}
