/* Mesh placement and groups on n ranks.
 * 1. Ranks on one node, default order: coordinates are the innermost-first
 *    digits of the rank; every group holds exactly the ranks that share the
 *    other coordinates (computed here from the rank arithmetic).
 * 2. Simulated round-robin mapping over two nodes (node = rank % 2): every
 *    innermost (tp) group lies on a single node, and comm_node_order puts
 *    node 0's ranks before node 1's.
 * 3. A mesh that does not fit is refused with the numbers in the message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/comm.h>

#include "mpitest.h"

/* Axis sizes for n ranks: tp innermost, then pp, then dp. */
static void shape(int n, int sizes[3]) {
  sizes[0] = n % 2 == 0 ? 2 : n;
  sizes[1] = (n / sizes[0]) % 2 == 0 ? 2 : 1;
  sizes[2] = n / (sizes[0] * sizes[1]);
}

static void check_identity_mesh(comm_t *world) {
  const char *names[3] = {"tp", "pp", "dp"};
  int sizes[3];
  comm_mesh_t *m;
  shape(size, sizes);
  if (comm_mesh_create(&m, world, 3, names, sizes, NULL)) {
    FAIL("mesh_create: %s", comm_last_error(world));
    return;
  }
  int digit[3] = {rank % sizes[0], (rank / sizes[0]) % sizes[1], rank / (sizes[0] * sizes[1])};
  for (int a = 0; a < 3; a++)
    if (comm_mesh_coord(m, names[a]) != digit[a])
      FAIL("coord %s = %d, want %d", names[a], comm_mesh_coord(m, names[a]), digit[a]);
  /* every subset of axes: members are the ranks whose other digits equal mine */
  const char *subsets[] = {"tp", "pp", "dp", "tp,pp", "pp,dp", "dp,tp", "tp,pp,dp"};
  for (int s = 0; s < 7; s++) {
    comm_t *g;
    if (comm_mesh_group(m, subsets[s], &g)) {
      FAIL("group %s: %s", subsets[s], comm_mesh_last_error(m));
      continue;
    }
    int *got = malloc(sizeof(int) * size), want = 0, n = comm_size(g);
    comm_allgather(g, got, &rank, 1, COMM_I32);
    for (int r = 0; r < size; r++) {
      int d[3] = {r % sizes[0], (r / sizes[0]) % sizes[1], r / (sizes[0] * sizes[1])}, same = 1;
      for (int a = 0; a < 3; a++)
        if (!strstr(subsets[s], names[a]) && d[a] != digit[a]) same = 0;
      if (same) {
        if (want >= n || got[want] != r)
          FAIL("group %s: member %d is rank %d, want %d", subsets[s], want,
               want < n ? got[want] : -1, r);
        want++;
      }
    }
    if (want != n) FAIL("group %s has %d ranks, want %d", subsets[s], n, want);
    if (strcmp(comm_name(g), subsets[s]) && s != 5)
      FAIL("group name '%s', want '%s'", comm_name(g), subsets[s]);
    free(got);
  }
  int coords[3] = {0, 0, 0}, r0 = -1;
  if (comm_mesh_rank_at(m, coords, &r0) || r0 != 0) FAIL("rank_at(0,0,0) = %d", r0);
  comm_t *g;
  if (comm_mesh_group(m, "xx", &g) != STRATA_ENOTFOUND || !strstr(comm_mesh_last_error(m), "xx"))
    FAIL("unknown axis not refused: %s", comm_mesh_last_error(m));
  comm_mesh_destroy(m);
}

static void check_two_nodes(comm_t *world) {
  comm_config_t cfg = COMM_CONFIG_DEFAULTS;
  cfg.node_id = rank % 2; /* what mpirun --map-by node would give on two nodes */
  comm_t *c;
  comm_from_mpi(&c, comm_mpi(world), &cfg);
  const char *names[2] = {"tp", "dp"};
  int sizes[2] = {size / 2, 2};
  comm_mesh_t *m;
  if (comm_mesh_create(&m, c, 2, names, sizes, NULL)) {
    FAIL("two-node mesh: %s", comm_last_error(c));
    comm_destroy(c);
    return;
  }
  comm_t *tp;
  comm_mesh_group(m, "tp", &tp);
  int node = rank % 2, lo, hi;
  comm_allreduce(tp, &lo, &node, 1, COMM_I32, COMM_MIN);
  comm_allreduce(tp, &hi, &node, 1, COMM_I32, COMM_MAX);
  if (lo != hi) FAIL("tp group spans nodes %d..%d", lo, hi);
  comm_mesh_destroy(m);
  /* node_order = 0 ignores nodes: tp groups are consecutive ranks again */
  comm_mesh_config_t mc = {.node_order = 0};
  if (comm_mesh_create(&m, c, 2, names, sizes, &mc) == STRATA_OK) {
    if (comm_mesh_coord(m, "tp") != rank % (size / 2)) FAIL("node_order=0: tp coord wrong");
    comm_mesh_destroy(m);
  }
  /* comm_node_order: node 0's ranks (the even ones) first, then node 1's,
   * each by rank: position p holds rank 2p (p < size/2), else 2(p - size/2) + 1 */
  MPI_Comm placed;
  int pr = -1;
  if (comm_node_order(c, &placed) != STRATA_OK) {
    FAIL("comm_node_order: %s", comm_last_error(c));
  } else {
    MPI_Comm_rank(placed, &pr);
    int want = rank % 2 == 0 ? rank / 2 : size / 2 + rank / 2;
    if (pr != want) FAIL("comm_node_order: rank %d at position %d, want %d", rank, pr, want);
    MPI_Comm_free(&placed);
  }
  comm_destroy(c);
}

static void check_refusal(comm_t *world) {
  const char *names[2] = {"tp", "dp"};
  int sizes[2] = {2, size + 1};
  comm_mesh_t *m = NULL;
  char want[64];
  snprintf(want, sizeof want, "needs %d ranks", 2 * (size + 1));
  int rc = comm_mesh_create(&m, world, 2, names, sizes, NULL);
  if (rc != STRATA_EINVAL || m || !strstr(comm_last_error(world), want) ||
      !strstr(comm_last_error(world), "tp=2 x dp="))
    FAIL("bad mesh: rc %d, message '%s'", rc, comm_last_error(world));
  const char *dup[2] = {"tp", "tp"};
  int ones[2] = {1, size};
  if (comm_mesh_create(&m, world, 2, dup, ones, NULL) != STRATA_EINVAL) FAIL("duplicate axis accepted");
}

int main(void) {
  comm_t *world;
  if (comm_init(&world, NULL)) return 1;
  rank = comm_rank(world);
  size = comm_size(world);
  check_identity_mesh(world);
  if (size % 2 == 0) check_two_nodes(world);
  check_refusal(world);
  int total = mpitest_total("mesh");
  comm_destroy(world);
  comm_finalize();
  return total ? 1 : 0;
}
