# liboffload's NVMe tier through the chunk manager against plain sequential file I/O.
$(eval $(call strata_program,bench_offload_nvme,bench/offload_nvme.c,offload))
BENCH_PROGRAMS += 0:$$BUILD/bin/bench_offload_nvme
