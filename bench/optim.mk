# liboptim benchmarks: fused CPU updates of 64 Mi parameters on 2 threads
# against a triad moving the same bytes (issue: ratio >= 0.8); on a GPU
# machine the same against a device copy (GPU_BENCH, `make bench-gpu`).
$(eval $(call strata_program,optim_bench_cpu,bench/optim_cpu.c,optim))
BENCH_PROGRAMS += 0:$(BUILD)/bin/optim_bench_cpu@adamw@64@2 0:$(BUILD)/bin/optim_bench_cpu@lamb@64@2 \
                  0:$(BUILD)/bin/optim_bench_cpu@adamw_bf16@64@2
ifeq ($(HAVE_CUDA),1)
$(eval $(call strata_program,optim_bench_gpu,bench/optim_gpu.c,optim))
GPU_BENCH += $(BUILD)/bin/optim_bench_gpu
endif
