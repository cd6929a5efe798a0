/* The machines a run started with `strata run -n N` may use, for elastic
 * relaunches: the slots of a hostfile (mpirun's syntax: `name slots=K`, a
 * name alone counting one slot, `#` comments, a name listed again adding
 * its slots) or of a Slurm allocation (SLURM_NTASKS), and where ranks sit
 * on them: mpirun's default mapping fills each machine's slots in the
 * hostfile's order, so rank r is on the machine whose slots hold position r.
 *
 * With STRATA_SIMULATE_NODES=1 a hostfile's machines are simulated on this
 * one: mpirun starts every rank here, and each rank takes its machine's
 * name from STRATA_RANK_NODES (the names of ranks 0, 1, ... separated by
 * commas), which strata.world orders the ranks by (libcomm's placement),
 * as the failure records and the relaunches use it. Tests use this to run
 * a two-node elastic run on one machine. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata_lua.h"

static int host_index(const lstrata_hosts_t *hs, const char *name) {
  for (int i = 0; i < hs->n; i++)
    if (!strcmp(hs->h[i].name, name)) return i;
  return -1;
}

int lstrata_hosts_read(lstrata_hosts_t *hs, const char *hostfile, char *err, size_t errn) {
  memset(hs, 0, sizeof *hs);
  if (!hostfile) {
    const char *t = getenv("SLURM_NTASKS");
    if (!t) t = getenv("SLURM_NPROCS");
    if (t && atoi(t) > 0) {
      hs->total = atoi(t);
      snprintf(hs->source, sizeof hs->source, "the Slurm allocation (SLURM_NTASKS = %d)", hs->total);
    }
    return 0;
  }
  snprintf(hs->source, sizeof hs->source, "hostfile %s", hostfile);
  const char *sim = getenv("STRATA_SIMULATE_NODES");
  hs->simulated = sim && *sim && strcmp(sim, "0");
  FILE *f = fopen(hostfile, "r");
  if (!f) {
    snprintf(err, errn, "strata run: --hostfile %s: %s", hostfile, strerror(errno));
    return -1;
  }
  char line[1024];
  for (int ln = 1; fgets(line, sizeof line, f); ln++) {
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *save = NULL, *name = strtok_r(line, " \t\r\n", &save);
    if (!name) continue;
    long slots = 1;
    for (char *w; (w = strtok_r(NULL, " \t\r\n", &save));) {
      char *end;
      if (!strncmp(w, "slots=", 6)) {
        slots = strtol(w + 6, &end, 10);
        if (end == w + 6 || *end || slots < 1 || slots > 1 << 20) {
          snprintf(err, errn, "strata run: %s:%d: '%s': slots must be a positive number", hostfile, ln, w);
          fclose(f);
          return -1;
        }
      }
    }
    int i = host_index(hs, name);
    if (i < 0) {
      if (hs->n == LSTRATA_MAX_HOSTS || strlen(name) >= sizeof hs->h[0].name) {
        snprintf(err, errn, "strata run: %s:%d: '%s': more than %d machines or a name over %zu characters",
                 hostfile, ln, name, LSTRATA_MAX_HOSTS, sizeof hs->h[0].name - 1);
        fclose(f);
        return -1;
      }
      i = hs->n++;
      snprintf(hs->h[i].name, sizeof hs->h[i].name, "%s", name);
    }
    hs->h[i].slots += (int)slots;
    hs->total += (int)slots;
  }
  fclose(f);
  if (hs->total == 0) {
    snprintf(err, errn, "strata run: --hostfile %s names no machine", hostfile);
    return -1;
  }
  return 0;
}

/* The machine of rank r when np ranks fill the slots in order ("" when unknown). */
const char *lstrata_hosts_node_of(const lstrata_hosts_t *hs, int r) {
  for (int i = 0; i < hs->n; i++) {
    if (r < hs->h[i].slots) return hs->h[i].name;
    r -= hs->h[i].slots;
  }
  return "";
}

void lstrata_hosts_place(const lstrata_hosts_t *hs, int np, char *out, size_t n) {
  size_t k = 0;
  out[0] = 0;
  for (int i = 0, left = np; i < hs->n && left > 0 && k < n; i++) {
    int here = hs->h[i].slots < left ? hs->h[i].slots : left;
    if (here > 0) k += (size_t)snprintf(out + k, n - k, "%s%s %d", k ? ", " : "", hs->h[i].name, here);
    left -= here;
  }
}

void lstrata_hosts_rank_nodes(const lstrata_hosts_t *hs, int np, char *out, size_t n) {
  size_t k = 0;
  out[0] = 0;
  for (int r = 0; r < np && k < n; r++)
    k += (size_t)snprintf(out + k, n - k, "%s%s", r ? "," : "", lstrata_hosts_node_of(hs, r));
}

int lstrata_hosts_drop(lstrata_hosts_t *hs, const char *node) {
  int i = node ? host_index(hs, node) : -1;
  if (i >= 0 && hs->h[i].slots > 0) {
    hs->h[i].slots--;
    hs->total--;
    return 1;
  }
  if (!hs->n && hs->total > 0) { /* Slurm: the count alone */
    hs->total--;
    return 1;
  }
  return 0;
}

int lstrata_hosts_write(const lstrata_hosts_t *hs, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "# the machines left to an elastic run (strata run)\n");
  for (int i = 0; i < hs->n; i++)
    if (hs->h[i].slots > 0) fprintf(f, "%s slots=%d\n", hs->h[i].name, hs->h[i].slots);
  return fclose(f) ? -1 : 0;
}

/* Entry k of STRATA_RANK_NODES (its length into *len), or NULL. */
static const char *rank_node(int k, size_t *len) {
  const char *p = getenv("STRATA_RANK_NODES");
  if (!p || !*p) return NULL;
  for (; k > 0 && p; k--) p = strchr(p, ','), p = p ? p + 1 : NULL;
  if (p) *len = strcspn(p, ",");
  return p;
}

static int this_rank(void) {
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  if (!r) r = getenv("PMI_RANK");
  return r ? atoi(r) : -1;
}

void lstrata_this_node(char *out, size_t n) {
  size_t len = 0;
  const char *p = this_rank() >= 0 ? rank_node(this_rank(), &len) : NULL;
  if (p && len < n) {
    memcpy(out, p, len), out[len] = 0;
    return;
  }
  if (gethostname(out, n) != 0) snprintf(out, n, "?");
  out[n - 1] = 0;
}

int lstrata_simulated_node(void) {
  size_t len = 0, l2 = 0;
  const char *mine = this_rank() >= 0 ? rank_node(this_rank(), &len) : NULL, *p;
  for (int j = 0; mine && (p = rank_node(j, &l2)); j++)
    if (l2 == len && !strncmp(p, mine, len)) return j;
  return -1;
}

int lstrata_hosts_busiest(const lstrata_hosts_t *hs, int np) {
  if (!hs->n) return np; /* one machine (or Slurm's count alone): all of them together */
  int most = 0;
  for (int i = 0, left = np; i < hs->n && left > 0; i++) {
    int here = hs->h[i].slots < left ? hs->h[i].slots : left;
    if (here > most) most = here;
    left -= here;
  }
  return most > 0 ? most : 1;
}
