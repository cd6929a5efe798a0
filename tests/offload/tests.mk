# liboffload's tests: tiers, states, eviction against a brute-force optimum, NVMe.
$(eval $(call strata_criterion,test_offload,tests/offload/test_offload.c,offload))
TEST_SUITES += sh:tests/offload/consumer.sh
# The NVMe tier on a full disk (a small tmpfs, or tests/lua/fullfs.c).
$(eval $(call strata_program,offload_full_disk,tests/offload/full_disk.c,offload))
TEST_SUITES += sh:tests/offload/full_disk.sh
# The CUDA device tier on a GPU (plain program for `make test-gpu`).
ifeq ($(HAVE_CUDA),1)
$(eval $(call strata_program,offload_gpu_tier,tests/offload/gpu_tier.c,offload))
GPU_TESTS += $(BUILD)/bin/offload_gpu_tier
endif
