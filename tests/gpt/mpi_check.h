/* What the MPI programs of tests/gpt that check one distributed operation
 * share: CHECK, which counts a failed check and prints it with the
 * program's name, rank and line; reproducible random fills; the world
 * communicator and a one-thread tensor context to start with, and the
 * verdict over every rank to end with. */
#ifndef STRATA_TESTS_GPT_MPI_CHECK_H
#define STRATA_TESTS_GPT_MPI_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <strata/comm.h>
#include <strata/tensor.h>

static const char *check_name = "test";
static int rank, ranks, fails;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s np=%d rank %d line %d: ", check_name, ranks, rank, __LINE__);            \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

/* x[0..n) uniform in [-scale/2, scale/2), from seed (a linear congruential generator). */
static inline void check_fill(float *x, size_t n, unsigned seed, float scale) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = scale * ((float)(seed >> 8) / (float)(1u << 24) - 0.5f);
  }
}

/* The world (rank, ranks set) and a one-thread tensor context; exits 1 when either fails. */
static inline void check_start(const char *name, comm_t **world, tensor_ctx_t **tc) {
  check_name = name;
  tensor_ctx_options_t o = TENSOR_CTX_OPTIONS_DEFAULTS;
  o.threads = 1;
  if (comm_init(world, NULL) || tensor_ctx_create(tc, &o)) {
    fprintf(stderr, "%s: cannot start MPI or a tensor context\n", name);
    exit(1);
  }
  rank = comm_rank(*world), ranks = comm_size(*world);
}

/* Every rank's failures summed; "NAME np=N: ok" or "FAILED"; everything closed. Returns the exit status. */
static inline int check_finish(comm_t *world, tensor_ctx_t *tc) {
  int all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("%s np=%d: %s\n", check_name, ranks, all ? "FAILED" : "ok");
  tensor_ctx_destroy(tc);
  comm_destroy(world);
  comm_finalize();
  return all ? 1 : 0;
}

#endif
