# libparallel: composes the other libraries; HDF5 for checkpoints and metrics.
LIBS += parallel
parallel_DIR  := libparallel
parallel_DEPS := $(filter $(LIBS),tensor optim offload comm)
parallel_CFLAGS := $(HDF5_CFLAGS)
parallel_LIBS := $(HDF5_LIBS)
parallel_PC_REQUIRES := hdf5-openmpi
$(eval $(call strata_library,parallel))
