# libtensor benchmarks: a training step of the serial GPT model in model
# FLOP/s against the GEMM peak measured in the same run (goals: the GPT-2
# 124M shape and the byte-level shape each >= 0.9 of sgemm on 2 threads);
# the 124M shape also with its AdamW update (tensor.gpt124m.step.cpu).
$(eval $(call strata_program,bench_tensor_gpt,bench/tensor_gpt.c,parallel))
BENCH_PROGRAMS += 0:$$BUILD/bin/bench_tensor_gpt@gpt124m@2 0:$$BUILD/bin/bench_tensor_gpt@gptbyte@2
# GPU machines (`make bench-gpu`): the 124M and 350M shapes at T 1024, B 8 with
# bf16 GEMM inputs against a cuBLAS bf16 GEMM, with tokens/s and MFU against
# the device's spec-sheet peak (goal: MFU >= 0.5 at 350M); built from the
# model's sources and libtensor only, so it needs neither MPI nor HDF5 where
# it runs.
ifeq ($(HAVE_CUDA),1)
$(eval $(call strata_program,bench_tensor_gpu,bench/tensor_gpt.c $(wildcard libparallel/src/model/gpt*.c),tensor,-DBENCH_GPU_DEFAULTS -Ilibparallel/include -Ilibparallel/src/model -DGPT_WITHOUT_COMM))
GPU_BENCH += $(BUILD)/bin/bench_tensor_gpu
endif
# GPU machines: causal attention forward + backward at GPT-2's shape (B 8,
# T 1024, 12 heads of 64) on a bf16 context (cuDNN's fused flash attention
# where libcudnn.so.9 loads), in TFLOP/s against a cuBLAS bf16 GEMM measured
# in the same run (goal: ratio >= 0.5); libtensor only.
ifeq ($(HAVE_CUDA),1)
$(eval $(call strata_program,bench_tensor_attention_gpu,bench/tensor_attention.c,tensor))
GPU_BENCH += $(BUILD)/bin/bench_tensor_attention_gpu
endif
