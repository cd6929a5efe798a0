# liboptim's tests: Criterion unit tests, the stand-alone consumer (links
# liboptim alone), and the CUDA-vs-CPU program for `make test-gpu`.
OPTIM_TEST_SRCS := tests/optim/test_update.c tests/optim/test_shard.c tests/optim/test_misc.c
$(BUILD)/bin/test_optim: tests/optim/ref.h
$(eval $(call strata_criterion,test_optim,$(OPTIM_TEST_SRCS),optim))
$(eval $(call strata_program,optim_consumer,tests/optim/consumer.c,optim))
TEST_SUITES += sh:tests/optim/consumer.sh
# CUDA vs CPU (plain program: no MPI, no Criterion, no OpenBLAS).
ifeq ($(HAVE_CUDA),1)
$(eval $(call strata_program,optim_gpu_equiv,tests/optim/gpu_equiv.c,optim))
GPU_TESTS += $(BUILD)/bin/optim_gpu_equiv
endif
