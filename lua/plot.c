/* Loss curves: metrics read from HDF5, drawn by gnuplot (pngcairo). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/parallel.h>

#include "strata_lua.h"

int lstrata_plot(const char *in, const char *const *names_in, int n, const char *out, char *err,
                 size_t errlen) {
  char msg[512] = "";
  char **avail = NULL, *title = NULL, *entropy = NULL;
  const char *names[64];
  double *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  int navail = 0, has_step = 0, status = STRATA_EXIT_OK;
  FILE *gp = NULL;
  if (n > 64) n = 64;
  for (int k = 0; k < n; k++) names[k] = names_in[k];
  if (par_metrics_names(in, &avail, &navail, msg, sizeof msg) != STRATA_OK) {
    status = STRATA_EXIT_FAIL;
    goto done;
  }
  for (int k = 0; k < navail; k++) has_step |= strcmp(avail[k], "step") == 0;
  if (n == 0)
    for (int k = 0; k < navail; k++)
      if (!strcmp(avail[k], "loss") || !strcmp(avail[k], "val_loss")) names[n++] = avail[k];
  if (n == 0) {
    snprintf(msg, sizeof msg, "'%s' has no loss or val_loss; name the metrics to plot", in);
    status = STRATA_EXIT_USAGE;
    goto done;
  }
  for (int k = 0; k < n; k++) { /* every name first, so gnuplot starts only for a good request */
    int found = 0;
    for (int j = 0; j < navail; j++) found |= !strcmp(avail[j], names[k]);
    if (!found) {
      snprintf(msg, sizeof msg, "metrics '%s': no metric named '%s'", in, names[k]);
      status = STRATA_EXIT_USAGE;
      goto done;
    }
  }
  if (has_step && par_metrics_read(in, "step", &x, &nx, msg, sizeof msg) != STRATA_OK) {
    status = STRATA_EXIT_FAIL;
    goto done;
  }
  par_metrics_read_attr(in, "name", &title, NULL, 0);
  par_metrics_read_attr(in, "entropy_rate", &entropy, NULL, 0);
  fflush(stdout);
  if (!(gp = popen("gnuplot 2>&1", "w"))) {
    snprintf(msg, sizeof msg, "cannot start gnuplot: %s", strerror(errno));
    status = STRATA_EXIT_FAIL;
    goto done;
  }
  for (int k = 0; k < n; k++) {
    if (par_metrics_read(in, names[k], &y, &ny, msg, sizeof msg) != STRATA_OK) {
      status = STRATA_EXIT_FAIL;
      break;
    }
    fprintf(gp, "$d%d << EOD\n", k);
    int any = 0;
    for (size_t r = 0; r < ny; r++)
      if (isfinite(y[r])) {
        fprintf(gp, "%.17g %.17g\n", x && r < nx ? x[r] : (double)r, y[r]);
        any = 1;
      }
    if (!any) fprintf(gp, "NaN NaN\n"); /* an empty block would stop the plot */
    fprintf(gp, "EOD\n");
    free(y);
    y = NULL;
  }
  if (status == STRATA_EXIT_OK) {
    fprintf(gp, "set terminal pngcairo size 960,600 enhanced font 'sans,11'\n");
    fprintf(gp, "set output '%s'\n", out);
    fprintf(gp, "set grid\nset key top right\nset xlabel '%s'\n", has_step ? "step" : "row");
    fprintf(gp, "set ylabel 'nats per token'\n");
    if (title) fprintf(gp, "set title \"%s\" noenhanced\n", title);
    fprintf(gp, "plot ");
    for (int k = 0; k < n; k++)
      fprintf(gp, "%s$d%d using 1:2 with lines lw 2 title '%s' noenhanced", k ? ", " : "", k,
              names[k]);
    if (entropy && atof(entropy) > 0)
      fprintf(gp, ", %s with lines dt 2 lc rgb 'black' title 'entropy rate of the source'",
              entropy);
    fprintf(gp, "\n");
  }
  int prc = pclose(gp);
  if (status == STRATA_EXIT_OK && prc != 0) {
    snprintf(msg, sizeof msg, "gnuplot failed (status %d) writing '%s'", prc, out);
    status = STRATA_EXIT_FAIL;
  } else if (status == STRATA_EXIT_OK && access(out, R_OK) != 0) {
    snprintf(msg, sizeof msg, "gnuplot did not write '%s'", out);
    status = STRATA_EXIT_FAIL;
  }
done:
  free(title);
  free(entropy);
  free(x);
  free(y);
  for (int k = 0; k < navail; k++) free(avail[k]);
  free(avail);
  if (status != STRATA_EXIT_OK && err && errlen) snprintf(err, errlen, "%s", msg);
  return status;
}
