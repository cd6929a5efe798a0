$(eval $(call strata_program,bench_comm_allreduce,bench/comm_allreduce.c,comm))
BENCH_PROGRAMS += 4:$$BUILD/bin/bench_comm_allreduce
