/* BENCH comm.allreduce.<size>: libcomm allreduce bus bandwidth over raw
 * MPI_Allreduce, same buffers, same ranks, measured in the same run.
 * busbw = 2 (n-1)/n * bytes / time (the ring volume per rank). The two are
 * timed in alternating rounds and each keeps its best round, so a noisy
 * neighbour penalises both alike. libcomm runs with its default
 * configuration (argument check on). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata/comm.h>

static double time_round(comm_t *c, float *buf, size_t n, int iters, int raw) {
  MPI_Comm m = comm_mpi(c);
  MPI_Barrier(m);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) {
    if (raw) MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, m);
    else comm_allreduce(c, buf, buf, n, COMM_F32, COMM_SUM);
  }
  double t = MPI_Wtime() - t0, tmax;
  MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, m); /* the slowest rank sets the pace */
  return tmax / iters;
}

int main(int argc, char **argv) {
  comm_t *c;
  if (comm_init(&c, NULL)) return 1;
  int rank = comm_rank(c), size = comm_size(c);
  const int mib[] = {1, 16, 64};
  for (int s = 0; s < 3; s++) {
    size_t bytes = (size_t)mib[s] << 20, n = bytes / 4;
    float *buf = malloc(bytes);
    for (size_t i = 0; i < n; i++) buf[i] = 1e-6f * (float)(i % 1000);
    int iters = mib[s] == 1 ? 40 : mib[s] == 16 ? 6 : 2, rounds = argc > 1 ? atoi(argv[1]) : 5;
    double best_raw = 1e30, best_lib = 1e30;
    time_round(c, buf, n, 1, 1); /* warm up both paths */
    time_round(c, buf, n, 1, 0);
    for (int r = 0; r < rounds; r++) {
      double t = time_round(c, buf, n, iters, 1);
      if (t < best_raw) best_raw = t;
      t = time_round(c, buf, n, iters, 0);
      if (t < best_lib) best_lib = t;
    }
    double vol = 2.0 * (size - 1) / size * (double)bytes / 1e9;
    double bw_lib = vol / best_lib, bw_raw = vol / best_raw;
    if (rank == 0)
      printf("BENCH comm.allreduce.%dMiB value=%.3f unit=GB/s baseline=%.3f ratio=%.3f\n", mib[s],
             bw_lib, bw_raw, bw_lib / bw_raw);
    free(buf);
  }
  comm_destroy(c);
  comm_finalize();
  return 0;
}
