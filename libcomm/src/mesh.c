/* Meshes: named axes over the ranks of a communicator.
 *
 * Ranks are first put in placement order (by node, then by rank, so that
 * consecutive positions share a node whenever they can), then position i
 * gets coordinates innermost first: coord[a] = (i / stride[a]) % size[a].
 * The innermost axes therefore land inside a node, as the DeepSpeed and
 * Megatron mappings want for tensor parallelism. */
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct comm_mesh {
  comm_t *base;
  int naxes;
  char names[COMM_MESH_MAX_AXES][32];
  int sizes[COMM_MESH_MAX_AXES];
  int stride[COMM_MESH_MAX_AXES];
  int coords[COMM_MESH_MAX_AXES];
  int *placement; /* position -> rank in base */
  comm_t *groups[1 << COMM_MESH_MAX_AXES]; /* by axis bitmask */
  char err[512];
};

static int cmp_node_rank(const void *a, const void *b) {
  const int *x = a, *y = b; /* (node, rank) pairs */
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The node of this rank: the configured id, or the lowest rank sharing memory with it. */
static int node_of_rank(comm_t *c, int *node) {
  MPI_Comm local;
  int mrc;
  if (c->cfg.node_id >= 0) {
    *node = c->cfg.node_id;
    return STRATA_OK;
  }
  mrc = MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local);
  if (mrc != MPI_SUCCESS) return comm_fail_mpi(c, mrc, "mesh: finding ranks on the same node");
  mrc = MPI_Allreduce(&c->rank, node, 1, MPI_INT, MPI_MIN, local);
  MPI_Comm_free(&local);
  return mrc == MPI_SUCCESS ? STRATA_OK : comm_fail_mpi(c, mrc, "mesh: agreeing on node ids");
}

/* The placement order of c's ranks: by node (when node_order), then by
 * rank. placement[i] is the rank at position i; *index this rank's position. */
static int place(comm_t *c, int node_order, int *placement, int *index) {
  int node = 0, rc, mrc;
  int *pairs = malloc(sizeof(int) * 2 * (size_t)c->size);
  if (!pairs) return comm_fail(c, STRATA_ENOMEM, "mesh: out of memory");
  if (node_order && (rc = node_of_rank(c, &node)) != STRATA_OK) {
    free(pairs);
    return rc;
  }
  int mine[2] = {node_order ? node : 0, c->rank};
  if ((mrc = MPI_Allgather(mine, 2, MPI_INT, pairs, 2, MPI_INT, c->mpi)) != MPI_SUCCESS) {
    free(pairs);
    return comm_fail_mpi(c, mrc, "mesh: gathering placement");
  }
  qsort(pairs, (size_t)c->size, 2 * sizeof(int), cmp_node_rank);
  for (int i = 0; i < c->size; i++) {
    if (placement) placement[i] = pairs[2 * i + 1];
    if (pairs[2 * i + 1] == c->rank) *index = i;
  }
  free(pairs);
  return STRATA_OK;
}

static int placement(comm_mesh_t *m, int node_order) {
  comm_t *c = m->base;
  int index = 0, rc;
  if (!(m->placement = malloc(sizeof(int) * (size_t)c->size)))
    return comm_fail(c, STRATA_ENOMEM, "mesh: out of memory");
  if ((rc = place(c, node_order, m->placement, &index)) != STRATA_OK) return rc;
  for (int a = 0; a < m->naxes; a++) m->coords[a] = (index / m->stride[a]) % m->sizes[a];
  return STRATA_OK;
}

int comm_node_order(comm_t *c, MPI_Comm *out) {
  int index = 0, rc, mrc;
  if (!c || !out) return STRATA_EINVAL;
  *out = MPI_COMM_NULL;
  if ((rc = place(c, 1, NULL, &index)) != STRATA_OK) return rc;
  if ((mrc = MPI_Comm_split(c->mpi, 0, index, out)) != MPI_SUCCESS)
    return comm_fail_mpi(c, mrc, "ordering the ranks by node");
  return STRATA_OK;
}

static int validate(comm_t *c, int naxes, const char *const *names, const int *sizes) {
  if (naxes < 1 || naxes > COMM_MESH_MAX_AXES)
    return comm_fail(c, STRATA_EINVAL, "mesh: %d axes requested; 1 to %d are supported", naxes,
                     COMM_MESH_MAX_AXES);
  if (!names || !sizes) return comm_fail(c, STRATA_EINVAL, "mesh: names or sizes is NULL");
  long product = 1;
  char shape[256];
  size_t k = 0;
  shape[0] = 0;
  for (int a = 0; a < naxes; a++) {
    if (!names[a] || !names[a][0] || strlen(names[a]) >= 32 || strchr(names[a], ','))
      return comm_fail(c, STRATA_EINVAL, "mesh: axis %d has an invalid name '%s' (1-31 characters, "
                       "no commas)", a, names[a] ? names[a] : "(null)");
    for (int b = 0; b < a; b++)
      if (!strcmp(names[a], names[b]))
        return comm_fail(c, STRATA_EINVAL, "mesh: axis name '%s' appears twice", names[a]);
    if (sizes[a] < 1)
      return comm_fail(c, STRATA_EINVAL, "mesh: axis '%s' has size %d; sizes must be >= 1",
                       names[a], sizes[a]);
    if (product <= INT_MAX) product *= sizes[a]; /* saturates: only equality matters */
    if (k < sizeof shape)
      k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%s=%d", a ? " x " : "", names[a],
                            sizes[a]);
  }
  if (product != c->size)
    return comm_fail(c, STRATA_EINVAL,
                     "mesh %s needs %ld ranks, but communicator '%s' has %d", shape, product,
                     c->name, c->size);
  return STRATA_OK;
}

int comm_mesh_create(comm_mesh_t **out, comm_t *c, int naxes, const char *const *names,
                     const int *sizes, const comm_mesh_config_t *cfg) {
  comm_mesh_config_t conf = cfg ? *cfg : (comm_mesh_config_t)COMM_MESH_CONFIG_DEFAULTS;
  comm_mesh_t *m = NULL;
  int rc;
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  if (!c) return STRATA_EINVAL;
  if ((rc = validate(c, naxes, names, sizes)) != STRATA_OK) return rc;
  if (!(m = calloc(1, sizeof *m))) return comm_fail(c, STRATA_ENOMEM, "mesh: out of memory");
  m->base = c;
  m->naxes = naxes;
  for (int a = 0, s = 1; a < naxes; a++) {
    snprintf(m->names[a], sizeof m->names[a], "%s", names[a]);
    m->sizes[a] = sizes[a];
    m->stride[a] = s;
    s *= sizes[a];
  }
  if ((rc = placement(m, conf.node_order)) != STRATA_OK) goto fail;
  for (int mask = 1; mask < (1 << naxes); mask++) {
    int color = 0, key = 0, kstride = 1;
    char name[COMM_MESH_MAX_AXES * 32 + 8];
    size_t k = 0;
    for (int a = 0; a < naxes; a++) {
      if (mask & (1 << a)) {
        key += m->coords[a] * kstride;
        kstride *= m->sizes[a];
        k += (size_t)snprintf(name + k, sizeof name - k, "%s%s", k ? "," : "", m->names[a]);
      } else {
        color += m->coords[a] * m->stride[a];
      }
    }
    if ((rc = comm_split(&m->groups[mask], c, color, key)) != STRATA_OK) goto fail;
    comm_set_name(m->groups[mask], name);
  }
  *out = m;
  return STRATA_OK;
fail:
  comm_mesh_destroy(m);
  return rc;
}

void comm_mesh_destroy(comm_mesh_t *m) {
  if (!m) return;
  for (int i = 0; i < (1 << COMM_MESH_MAX_AXES); i++) comm_destroy(m->groups[i]);
  free(m->placement);
  free(m);
}

static int axis_index(const comm_mesh_t *m, const char *name, size_t len) {
  for (int a = 0; a < m->naxes; a++)
    if (strlen(m->names[a]) == len && !strncmp(m->names[a], name, len)) return a;
  return -1;
}

static void list_axes(const comm_mesh_t *m, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int a = 0; a < m->naxes && k < n; a++)
    k += (size_t)snprintf(buf + k, n - k, "%s%s", a ? ", " : "", m->names[a]);
}

int comm_mesh_group(comm_mesh_t *m, const char *axes, comm_t **out) {
  if (!out) return STRATA_EINVAL;
  *out = NULL;
  if (!m || !axes) return STRATA_EINVAL;
  int mask = 0;
  for (const char *p = axes; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int a = axis_index(m, p, len);
    if (a < 0) {
      char known[256];
      list_axes(m, known, sizeof known);
      snprintf(m->err, sizeof m->err, "mesh: no axis '%.*s' in '%s' (axes: %s)", (int)len, p, axes,
               known);
      return STRATA_ENOTFOUND;
    }
    mask |= 1 << a;
    p = e ? e + 1 : p + len;
  }
  if (!mask) {
    snprintf(m->err, sizeof m->err, "mesh: empty axis list");
    return STRATA_EINVAL;
  }
  *out = m->groups[mask];
  return STRATA_OK;
}

int comm_mesh_coord(const comm_mesh_t *m, const char *axis) {
  int a = m && axis ? axis_index(m, axis, strlen(axis)) : -1;
  return a < 0 ? -1 : m->coords[a];
}

int comm_mesh_axis_size(const comm_mesh_t *m, const char *axis) {
  int a = m && axis ? axis_index(m, axis, strlen(axis)) : -1;
  return a < 0 ? -1 : m->sizes[a];
}

int comm_mesh_rank_at(const comm_mesh_t *m, const int *coords, int *rank) {
  if (!m || !coords || !rank) return STRATA_EINVAL;
  int index = 0;
  for (int a = 0; a < m->naxes; a++) {
    if (coords[a] < 0 || coords[a] >= m->sizes[a]) {
      snprintf(((comm_mesh_t *)m)->err, sizeof m->err,
               "mesh: coordinate %d on axis '%s' out of range [0, %d)", coords[a], m->names[a],
               m->sizes[a]);
      return STRATA_EINVAL;
    }
    index += coords[a] * m->stride[a];
  }
  *rank = m->placement[index];
  return STRATA_OK;
}

const char *comm_mesh_last_error(const comm_mesh_t *m) { return m ? m->err : "no mesh (NULL)"; }
