# tests/train: the training engine of libparallel (strata/par_train.h) from C, no Lua.
$(eval $(call strata_program,example_engine,tests/train/example_engine.c,parallel))
TEST_SUITES += mpi:tests/train/mpi.list
$(eval $(call strata_program,engine_faults,tests/train/engine_faults.c,parallel))
$(eval $(call strata_program,zero_equiv,tests/train/zero_equiv.c,parallel))
$(eval $(call strata_program,zero_reshard,tests/train/zero_reshard.c,parallel))
$(eval $(call strata_program,mixed_precision,tests/train/mixed_precision.c,parallel))
$(eval $(call strata_program,tp_engine,tests/train/tp_engine.c,parallel))
$(eval $(call strata_program,pp_engine,tests/train/pp_engine.c,parallel))
$(eval $(call strata_program,offload_engine,tests/train/offload_engine.c,parallel))
# Sequence parallelism by ring self-attention against the serial run.
$(eval $(call strata_program,sp_engine,tests/train/sp_engine.c,parallel))
# The engine with 2D, 2.5D and 3D tensor parallelism against the serial run.
$(eval $(call strata_program,tpmd_engine,tests/train/tpmd_engine.c,parallel))
# An elastic run grown in memory: 2 ranks spawn 2 more and migrate their state.
$(eval $(call strata_program,elastic_migrate,tests/train/elastic_migrate.c,parallel))
# The engine on a CUDA device against the CPU engine (make test-gpu: one rank
# in the bundle; exit 77 without a GPU); with --cpu-checks in mpi.list, what
# needs no GPU: device requests refused by name, auto falling back to the CPU.
$(eval $(call strata_program,gpu_engine,tests/train/gpu_engine.c,parallel))
GPU_TESTS += $(BUILD)/bin/gpu_engine
GPU_MPI_TESTS += gpu_engine
# Megatron 1D tensor parallelism (tp = 2) on CUDA devices against the CPU:
# needs mpirun (the bundle runs it with 2 ranks, sharing a GPU if need be;
# as a singleton it exits 77); --cpu-checks in mpi.list.
$(eval $(call strata_program,gpu_tp_engine,tests/train/gpu_tp_engine.c,parallel))
GPU_TESTS += $(BUILD)/bin/gpu_tp_engine
# 2D, 2.5D and 3D tensor parallelism on CUDA devices against the CPU (the
# layers alone and the engine): mpirun -np 4 or 8 (its header says how; the
# bundle runs it with 4 ranks sharing the GPUs, as a singleton it exits 77);
# --cpu-checks in mpi.list (4 ranks: auto's fallback, cuda's refusal, the
# cases with the CPU as the device).
$(eval $(call strata_program,gpu_tpmd_engine,tests/train/gpu_tpmd_engine.c,parallel))
GPU_TESTS += $(BUILD)/bin/gpu_tpmd_engine
GPU_MPI_TESTS += gpu_tpmd_engine:4
GPU_MPI_TESTS += gpu_tp_engine
# ZeRO-Offload on CUDA devices against the CPU engine, device and host bytes
# against the planner, checkpoints both ways (make test-gpu; under mpirun
# several ranks may share one GPU); --cpu-checks in mpi.list.
$(eval $(call strata_program,gpu_offload,tests/train/gpu_offload.c,parallel))
GPU_TESTS += $(BUILD)/bin/gpu_offload
GPU_MPI_TESTS += gpu_offload
# The interleaved pipeline schedule and ring self-attention (sp = 2) on CUDA
# devices against the CPU: needs mpirun (the bundle runs it with 2 ranks,
# sharing a GPU if need be; as a singleton it exits 77); --cpu-checks in mpi.list.
$(eval $(call strata_program,gpu_pp_engine,tests/train/gpu_pp_engine.c,parallel))
GPU_TESTS += $(BUILD)/bin/gpu_pp_engine
GPU_MPI_TESTS += gpu_pp_engine
