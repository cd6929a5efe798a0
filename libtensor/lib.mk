# libtensor: tensors, CPU kernels (OpenMP + OpenBLAS) and CUDA twins (cuBLAS + own kernels).
LIBS += tensor
tensor_DIR  := libtensor
tensor_DEPS :=
tensor_CFLAGS := $(BLAS_CFLAGS)
tensor_LIBS := $(BLAS_LIBS)
tensor_PC_REQUIRES_PRIVATE := openblas
tensor_OPENMP := 1
$(eval $(call strata_library,tensor))
