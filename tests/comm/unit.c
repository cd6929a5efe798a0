/* libcomm unit tests on one rank (a singleton MPI inside each Criterion
 * test process): argument errors and their messages, handle life cycle,
 * adoption of a host communicator, counters, and the f16/bf16 conversions
 * of strata/half.h against independent references. */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <strata/comm.h>
#include <strata/half.h>

static comm_t *world;
static void setup(void) { cr_assert_eq(comm_init(&world, NULL), STRATA_OK); }
static void teardown(void) {
  comm_destroy(world);
  comm_finalize();
}
TestSuite(comm, .init = setup, .fini = teardown);

#define ASSERT_ERR(call, code, needle)                                                             \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    cr_assert_eq(rc_, code, "%s returned %d (%s)", #call, rc_, comm_last_error(world));           \
    cr_assert(strstr(comm_last_error(world), needle), "message '%s' lacks '%s'",                   \
              comm_last_error(world), needle);                                                     \
  } while (0)

Test(comm, one_rank_collectives_are_identities) {
  float x[3] = {1.5f, -2, 4}, y[3];
  cr_assert_eq(comm_size(world), 1);
  cr_assert_eq(comm_allreduce(world, y, x, 3, COMM_F32, COMM_AVG), STRATA_OK);
  cr_assert(y[0] == 1.5f && y[1] == -2 && y[2] == 4);
  cr_assert_eq(comm_broadcast(world, x, 3, COMM_F32, 0), STRATA_OK);
  cr_assert_eq(comm_barrier(world), STRATA_OK);
  comm_counter_t k;
  comm_counters(world, COMM_K_ALLREDUCE, &k);
  cr_assert_eq(k.calls, 1);
  cr_assert_eq(k.bytes_sent, 0, "one rank moves nothing: 2(n-1)/n = 0");
  comm_counters_reset(world);
  comm_counters(world, COMM_K_ALLREDUCE, &k);
  cr_assert_eq(k.calls, 0);
}

/* The host-staging rule (NCCL refuses two ranks of a communicator on one
 * GPU): ranks as strata places them, node-local rank modulo the node's
 * GPUs, written out by hand for the layouts that matter. */
Test(comm, ranks_sharing_a_gpu_need_host_staging) {
  int one_node[4] = {0, 0, 0, 0}, two_nodes[4] = {0, 0, 4, 4};
  int dev_1gpu[4] = {0, 0, 0, 0}, dev_2gpu[4] = {0, 1, 0, 1}, dev_4gpu[4] = {0, 1, 2, 3}, none[4] = {-1, -1, -1, -1};
  cr_expect_eq(comm_device_staging(1, one_node, dev_1gpu), 0, "one rank: nothing shared");
  cr_expect_eq(comm_device_staging(2, one_node, dev_1gpu), 1, "2 ranks on 1 GPU");
  cr_expect_eq(comm_device_staging(2, one_node, dev_2gpu), 0, "2 ranks on 2 GPUs");
  cr_expect_eq(comm_device_staging(4, one_node, dev_2gpu), 1, "4 ranks on 2 GPUs: ranks 0 and 2 share");
  cr_expect_eq(comm_device_staging(4, one_node, dev_4gpu), 0, "4 ranks on 4 GPUs");
  /* 2 nodes of 2 ranks with one GPU each: node-local ranks 0, 1 -> device 0, 0 */
  int per_node_1gpu[4] = {0, 0, 0, 0};
  cr_expect_eq(comm_device_staging(4, two_nodes, per_node_1gpu), 1, "2 ranks per node on 1 GPU each");
  /* a data-parallel group across the nodes, one rank per node, both on their node's GPU 0 */
  int across[2] = {0, 4}, dev0[2] = {0, 0};
  cr_expect_eq(comm_device_staging(2, across, dev0), 0, "GPU 0 of two different nodes");
  /* the tensor-parallel group of tp = 2 on a node with 2 GPUs, and the
   * data-parallel group of ranks 0 and 2 there: both on GPU 0 */
  int dp_nodes[2] = {0, 0}, dp_devs[2] = {0, 0};
  cr_expect_eq(comm_device_staging(2, dp_nodes, dp_devs), 1, "the dp group of ranks 0 and 2 on 2 GPUs");
  cr_expect_eq(comm_device_staging(4, one_node, none), 0, "no devices: host buffers only");
  cr_expect_eq(comm_device_staging(4, NULL, dev_1gpu), 0);
  cr_expect_eq(comm_is_staged(world), 0, "no GPU here (or one rank): NCCL or host buffers");
  cr_expect_eq(comm_is_staged(NULL), 0);
}

Test(comm, bad_arguments_name_the_values) {
  float x[4] = {0};
  ASSERT_ERR(comm_allreduce(world, NULL, x, 4, COMM_F32, COMM_SUM), STRATA_EINVAL,
             "receive buffer is NULL with count 4");
  ASSERT_ERR(comm_allreduce(world, x, x, 4, (comm_dtype_t)42, COMM_SUM), STRATA_EINVAL,
             "unknown dtype 42");
  ASSERT_ERR(comm_allreduce(world, x, x, 4, COMM_F32, (comm_op_t)9), STRATA_EINVAL,
             "unknown reduction op 9");
  ASSERT_ERR(comm_broadcast(world, x, 4, COMM_F32, 3), STRATA_EINVAL, "root 3 out of range [0, 1)");
  ASSERT_ERR(comm_send(world, x, 4, COMM_F32, -1, 0), STRATA_EINVAL, "peer rank -1");
  ASSERT_ERR(comm_send(world, x, 4, COMM_F32, 0, -5), STRATA_EINVAL, "tag -5");
  ASSERT_ERR(comm_allgatherv(world, x, x, NULL, COMM_F32), STRATA_EINVAL, "counts is NULL");
  ASSERT_ERR(comm_allreduce(world, x, x, (size_t)INT_MAX + 1, COMM_F32, COMM_SUM), STRATA_EINVAL,
             "2147483648 elements");
  comm_request_t *req;
  ASSERT_ERR(comm_iallreduce(world, x, NULL, 4, COMM_F32, COMM_SUM, &req), STRATA_EINVAL,
             "send buffer is NULL");
  cr_assert_null(req);
  cr_assert_eq(comm_allreduce(NULL, x, x, 4, COMM_F32, COMM_SUM), STRATA_EINVAL);
  /* after all those errors the communicator is still usable */
  cr_assert_eq(comm_allreduce(world, x, x, 4, COMM_F32, COMM_SUM), STRATA_OK);
  cr_assert_eq(comm_set_timeout(world, -1, COMM_ON_TIMEOUT_ERROR), STRATA_EINVAL);
}

Test(comm, handles) {
  comm_destroy(NULL);
  comm_mesh_destroy(NULL);
  cr_assert_eq(comm_wait(NULL), STRATA_OK);
  comm_t *d, *s;
  cr_assert_eq(comm_dup(&d, world), STRATA_OK);
  cr_assert_eq(comm_split(&s, d, -1, 0), STRATA_OK);
  cr_assert_null(s, "color < 0 leaves the rank out");
  cr_assert_eq(comm_split(&s, d, 0, 0), STRATA_OK);
  cr_assert_eq(comm_size(s), 1);
  comm_destroy(s);
  comm_destroy(d);
  cr_assert_str_eq(comm_strerror(STRATA_ETIMEOUT), "timed out");
  cr_assert_eq(comm_dtype_size(COMM_BF16), 2);
  cr_assert_eq(comm_dtype_size((comm_dtype_t)77), 0);
}

Test(comm, adopts_a_host_communicator) {
  MPI_Comm host;
  MPI_Comm_dup(MPI_COMM_WORLD, &host);
  comm_t *c;
  cr_assert_eq(comm_from_mpi(&c, host, NULL), STRATA_OK);
  MPI_Comm_free(&host); /* libcomm holds its own duplicate */
  int v = 7, w = 0;
  cr_assert_eq(comm_allreduce(c, &w, &v, 1, COMM_I32, COMM_MAX), STRATA_OK);
  cr_assert_eq(w, 7);
  comm_destroy(c);
}

Test(comm, mesh_that_does_not_fit) {
  const char *names[2] = {"tp", "dp"};
  int sizes[2] = {2, 3};
  comm_mesh_t *m = (comm_mesh_t *)1;
  ASSERT_ERR(comm_mesh_create(&m, world, 2, names, sizes, NULL), STRATA_EINVAL,
             "mesh tp=2 x dp=3 needs 6 ranks, but communicator 'world' has 1");
  cr_assert_null(m);
}

/* bf16 reference: the nearer of the two bf16 neighbours of f, ties to the
 * even one, decided in double arithmetic. */
static uint16_t bf16_ref(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  /* past the largest finite value, infinity sits where 2^128 would be */
  double vl = strata_bf16_to_f32(lo), vh = strata_bf16_to_f32(hi);
  if (isinf(vh)) vh = copysign(ldexp(1.0, 128), vh);
  double dl = fabs(vl - f), dh = fabs(vh - f);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

Test(half, bf16_rounds_to_nearest_even) {
  uint32_t s = 12345;
  for (int i = 0; i < 2000000; i++) {
    s = s * 1664525u + 1013904223u;
    uint32_t u = s & 0x7f7fffffu; /* finite; both signs via the next bit */
    if (s & 0x80000000u) u |= 0x80000000u;
    float f;
    memcpy(&f, &u, 4);
    uint16_t want = bf16_ref(f);
    cr_assert_eq(strata_f32_to_bf16(f), want, "f=%a: got %04x want %04x", f,
                 strata_f32_to_bf16(f), want);
  }
  cr_assert(isnan(strata_bf16_to_f32(strata_f32_to_bf16(NAN))));
}

Test(half, f16_matches_the_compiler) {
  /* GCC's _Float16 conversion (F16C on this target) is the reference. */
  for (uint32_t h = 0; h < 65536; h++) {
    _Float16 v;
    uint16_t b = (uint16_t)h;
    memcpy(&v, &b, 2);
    float want = (float)v, got = strata_f16_to_f32(b);
    cr_assert((isnan(want) && isnan(got)) || memcmp(&want, &got, 4) == 0, "h=%04x", h);
  }
  uint32_t s = 777;
  for (int i = 0; i < 2000000; i++) {
    s = s * 1664525u + 1013904223u;
    uint32_t u = (s & 0x3fffffffu) + 0x30000000u; /* around the f16 range, subnormals included */
    u |= s & 0x80000000u;
    float f;
    memcpy(&f, &u, 4);
    _Float16 v = (_Float16)f;
    uint16_t want;
    memcpy(&want, &v, 2);
    cr_assert_eq(strata_f32_to_f16(f), want, "f=%a: got %04x want %04x", f, strata_f32_to_f16(f),
                 want);
  }
}
