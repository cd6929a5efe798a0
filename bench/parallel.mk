# Data parallelism and ZeRO through the engine: dp = 2 scaling, ZeRO-3 against
# plain data parallelism, memory per rank per stage against the planner.
$(eval $(call strata_program,bench_parallel_zero,bench/parallel_zero.c,parallel))
BENCH_PROGRAMS += 2:$$BUILD/bin/bench_parallel_zero 4:$$BUILD/bin/bench_parallel_zero
# Megatron tensor parallelism: tp = 2 scaling on a model whose GEMMs dominate.
$(eval $(call strata_program,bench_parallel_tp,bench/parallel_tp.c,parallel))
BENCH_PROGRAMS += 2:$$BUILD/bin/bench_parallel_tp
$(eval $(call strata_program,bench_parallel_pp,bench/parallel_pp.c,parallel))
BENCH_PROGRAMS += 2:$$BUILD/bin/bench_parallel_pp
# Ring self-attention: activation memory per rank at sp = 4 against the serial attention.
$(eval $(call strata_program,bench_parallel_ring,bench/parallel_ring.c,parallel))
BENCH_PROGRAMS += 4:$$BUILD/bin/bench_parallel_ring
# Multi-dimensional tensor parallelism: one layer's bytes per rank, 1D over 3D at tp = 8.
$(eval $(call strata_program,bench_parallel_tp3d,bench/parallel_tp3d.c,parallel))
BENCH_PROGRAMS += 8:$$BUILD/bin/bench_parallel_tp3d
# Elastic growth 2 -> 4 ranks: the state moved in memory (spawn, merge, migrate) over a checkpoint's save and load.
$(eval $(call strata_program,bench_parallel_migrate,bench/parallel_migrate.c,parallel))
BENCH_PROGRAMS += 2:$$BUILD/bin/bench_parallel_migrate
