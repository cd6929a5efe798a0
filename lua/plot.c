/* Metric curves: metrics read from HDF5, drawn by gnuplot (pngcairo), one
 * panel per unit (the metrics' "unit" attributes, par_metrics_set_unit), so
 * that a loss in nats per token and a learning rate do not share an axis.
 * An output named *.gp receives the gnuplot script itself (data inline,
 * drawing FILE.png when run through gnuplot) instead of the picture. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/parallel.h>

#include "strata_lua.h"

#define MAX_NAMES 64

/* Units of the metrics that strata writes, for files from before units were
 * recorded (and for hand-written files that use the same names). */
static const struct {
  const char *name, *unit;
} known_units[] = {
    {"loss", "nats/token"},      {"val_loss", "nats/token"},     {"lr", "learning rate"},
    {"grad_norm", "gradient norm"}, {"tokens_per_s", "tokens/s"}, {"mem_peak", "bytes"},
    {"comm_bytes", "bytes"},     {"loss_scale", "loss scale"},   {"perplexity", "perplexity"},
    {"bits_per_byte", "bits/byte"}, {"tokens", "tokens"},        {"bytes", "bytes"},
};

/* The unit of metric `name` (malloc'd): its attribute, else the known one,
 * else its own name (a panel of its own). */
static char *unit_of(const char *in, const char *name) {
  char *u = NULL;
  if (par_metrics_read_unit(in, name, &u, NULL, 0) == STRATA_OK && u && *u) return u;
  free(u);
  for (size_t i = 0; i < sizeof known_units / sizeof *known_units; i++)
    if (!strcmp(known_units[i].name, name)) return strdup(known_units[i].unit);
  return strdup(name);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

int lstrata_plot(const char *in, const char *const *names_in, int n, const char *out, char *err,
                 size_t errlen) {
  char msg[600] = "", *png = NULL;
  char **avail = NULL, *title = NULL, *entropy = NULL, *units[MAX_NAMES] = {0};
  const char *names[MAX_NAMES];
  int panel[MAX_NAMES], npanels = 0, first_of[MAX_NAMES];
  double *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  int navail = 0, has_step = 0, status = STRATA_EXIT_OK, script = ends_with(out, ".gp");
  FILE *gp = NULL;
  if (n > MAX_NAMES) n = MAX_NAMES;
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
      int w = snprintf(msg, sizeof msg, "metrics '%s': no metric named '%s' (it has:", in, names[k]);
      for (int j = 0; j < navail && w > 0 && (size_t)w < sizeof msg; j++)
        w += snprintf(msg + w, sizeof msg - (size_t)w, "%s %s", j ? "," : "", avail[j]);
      if (w > 0 && (size_t)w < sizeof msg) snprintf(msg + w, sizeof msg - (size_t)w, ")");
      status = STRATA_EXIT_USAGE;
      goto done;
    }
  }
  /* Panels: one per unit, in the order the units first appear. */
  for (int k = 0; k < n; k++) {
    if (!(units[k] = unit_of(in, names[k]))) {
      snprintf(msg, sizeof msg, "out of memory");
      status = STRATA_EXIT_FAIL;
      goto done;
    }
    panel[k] = -1;
    for (int q = 0; q < npanels && panel[k] < 0; q++)
      if (!strcmp(units[first_of[q]], units[k])) panel[k] = q;
    if (panel[k] < 0) first_of[npanels] = k, panel[k] = npanels++;
  }
  if (has_step && par_metrics_read(in, "step", &x, &nx, msg, sizeof msg) != STRATA_OK) {
    status = STRATA_EXIT_FAIL;
    goto done;
  }
  par_metrics_read_attr(in, "name", &title, NULL, 0);
  par_metrics_read_attr(in, "entropy_rate", &entropy, NULL, 0);
  if (script) { /* FILE.gp draws FILE.png */
    size_t len = strlen(out);
    if (!(png = malloc(len + 2))) {
      snprintf(msg, sizeof msg, "out of memory");
      status = STRATA_EXIT_FAIL;
      goto done;
    }
    memcpy(png, out, len - 3);
    strcpy(png + len - 3, ".png");
    if (!(gp = fopen(out, "w"))) {
      snprintf(msg, sizeof msg, "cannot write '%s': %s", out, strerror(errno));
      status = STRATA_EXIT_FAIL;
      goto done;
    }
  } else {
    fflush(stdout);
    if (!(gp = popen("gnuplot 2>&1", "w"))) {
      snprintf(msg, sizeof msg, "cannot start gnuplot: %s", strerror(errno));
      status = STRATA_EXIT_FAIL;
      goto done;
    }
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
    fprintf(gp, "set terminal pngcairo size 960,%d enhanced font 'sans,11'\n",
            npanels > 2 ? 300 * npanels : 600);
    fprintf(gp, "set output '%s'\n", script ? png : out);
    fprintf(gp, "set grid\nset key top right\nset xlabel '%s'\n", has_step ? "step" : "row");
    if (npanels > 1)
      fprintf(gp, "set multiplot layout %d,1%s%s%s\n", npanels, title ? " title \"" : "", title ? title : "",
              title ? "\" noenhanced" : "");
    else if (title)
      fprintf(gp, "set title \"%s\" noenhanced\n", title);
    for (int q = 0; q < npanels; q++) {
      const char *unit = units[first_of[q]];
      fprintf(gp, "set ylabel '%s' noenhanced\n", unit);
      fprintf(gp, "plot ");
      int c = 0;
      for (int k = 0; k < n; k++)
        if (panel[k] == q)
          fprintf(gp, "%s$d%d using 1:2 with lines lw 2 title '%s' noenhanced", c++ ? ", " : "", k, names[k]);
      if (entropy && atof(entropy) > 0 && !strcmp(unit, "nats/token"))
        fprintf(gp, ", %s with lines dt 2 lc rgb 'black' title 'entropy rate of the source'", entropy);
      fprintf(gp, "\n");
    }
    if (npanels > 1) fprintf(gp, "unset multiplot\n");
  }
  int prc = script ? fclose(gp) : pclose(gp);
  if (status == STRATA_EXIT_OK && prc != 0) {
    if (script) snprintf(msg, sizeof msg, "writing '%s': %s", out, strerror(errno));
    else snprintf(msg, sizeof msg, "gnuplot failed (status %d) writing '%s'", prc, out);
    status = STRATA_EXIT_FAIL;
  } else if (status == STRATA_EXIT_OK && access(out, R_OK) != 0) {
    snprintf(msg, sizeof msg, "gnuplot did not write '%s'", out);
    status = STRATA_EXIT_FAIL;
  }
done:
  free(png);
  free(title);
  free(entropy);
  free(x);
  free(y);
  for (int k = 0; k < MAX_NAMES; k++) free(units[k]);
  for (int k = 0; k < navail; k++) free(avail[k]);
  free(avail);
  if (status != STRATA_EXIT_OK && err && errlen) snprintf(err, errlen, "%s", msg);
  return status;
}
