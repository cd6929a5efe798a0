# libtensor benchmarks: a training step of the serial GPT model in model
# FLOP/s against the GEMM peak measured in the same run (issue: GPT-2 124M
# shape >= 0.75 of sgemm, byte-level shape >= 0.7, both on 2 threads).
$(eval $(call strata_program,bench_tensor_gpt,bench/tensor_gpt.c,parallel))
BENCH_PROGRAMS += 0:$$BUILD/bin/bench_tensor_gpt@gpt124m@2 0:$$BUILD/bin/bench_tensor_gpt@gptbyte@2
ifeq ($(HAVE_CUDA),1)
GPU_BENCH += $(BUILD)/bin/bench_tensor_gpt@gpt124m-1024@1@10@cuda
endif
