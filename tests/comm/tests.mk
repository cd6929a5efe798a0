# libcomm tests: a 1-rank Criterion suite and multi-rank programs under mpirun.
$(eval $(call strata_criterion,test_comm,tests/comm/unit.c,comm))
$(eval $(call strata_program,comm_collectives,tests/comm/mpi_collectives.c,comm))
$(eval $(call strata_program,comm_mesh,tests/comm/mpi_mesh.c,comm))
$(eval $(call strata_program,comm_watchdog,tests/comm/mpi_watchdog.c,comm))
$(eval $(call strata_program,comm_spawn,tests/comm/mpi_spawn.c,comm))
TEST_SUITES += mpi:tests/comm/mpi.list sh:tests/comm/watchdog_abort.sh
ifeq ($(HAVE_CUDA),1)
$(eval $(call strata_program,gpu_comm_nccl,tests/comm/gpu_nccl.c,comm))
GPU_TESTS += $(BUILD)/bin/gpu_comm_nccl
GPU_MPI_TESTS += gpu_comm_nccl
endif
