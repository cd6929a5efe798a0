# libtensor unit tests: finite-difference checks of every backward against
# double-precision references, RNG sharding, errors, memory accounting, and
# the cuDNN attention graphs (test_sdpa.c reads libtensor's internal header).
$(eval $(call strata_criterion,test_tensor,$(wildcard tests/tensor/test_*.c),tensor,-Ilibtensor/src))
$(eval $(call strata_program,tensor_readme_example,tests/tensor/readme_example.c,tensor))
TEST_SUITES += sh:tests/tensor/readme_example.sh
# CPU vs CUDA equivalence (GPU machines, `make test-gpu`): a plain program
# linking libtensor and the GPT model's sources only (no MPI, HDF5 or Criterion).
ifeq ($(HAVE_CUDA),1)
$(eval $(call strata_program,tensor_gpu_equiv,tests/tensor/gpu_equiv.c $(wildcard libparallel/src/model/gpt*.c),tensor,-Ilibparallel/include -Ilibparallel/src/model -DGPT_WITHOUT_COMM))
GPU_TESTS += $(BUILD)/bin/tensor_gpu_equiv
# The caching allocator's statistics on the device.
$(eval $(call strata_program,tensor_gpu_alloc,tests/tensor/gpu_alloc.c,tensor))
GPU_TESTS += $(BUILD)/bin/tensor_gpu_alloc
# cuBLASLt's fused epilogues against the separate CPU ops.
$(eval $(call strata_program,tensor_gpu_epilogue,tests/tensor/gpu_epilogue.c,tensor))
GPU_TESTS += $(BUILD)/bin/tensor_gpu_epilogue
endif
