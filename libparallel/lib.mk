# libparallel: composes the other libraries; HDF5 for checkpoints and metrics.
LIBS += parallel
parallel_DIR  := libparallel
parallel_DEPS := $(filter $(LIBS),tensor optim offload comm)
parallel_CFLAGS := $(HDF5_CFLAGS)
parallel_LIBS := $(HDF5_LIBS)
parallel_PC_REQUIRES_PRIVATE := hdf5-openmpi
parallel_OPENMP := 1
$(eval $(call strata_library,parallel))
