# liboffload's NVMe tier through the chunk manager against plain sequential file I/O.
$(eval $(call strata_program,bench_offload_nvme,bench/offload_nvme.c,offload))
BENCH_PROGRAMS += 0:$$BUILD/bin/bench_offload_nvme
# ZeRO-Offload's static policy: AdamW over liboffload's host tier against plain arrays.
$(eval $(call strata_program,bench_optim_offload,bench/optim_offload.c,offload optim))
BENCH_PROGRAMS += 0:$$BUILD/bin/bench_optim_offload
# PatrickStar's chunk policy: the largest model against the static policy's, and eviction against Belady's optimum.
$(eval $(call strata_program,bench_offload_chunks,bench/offload_chunks.c,parallel))
BENCH_PROGRAMS += 1:$$BUILD/bin/bench_offload_chunks
