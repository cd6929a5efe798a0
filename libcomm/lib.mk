# libcomm: collectives and process meshes over MPI (NCCL for device buffers).
LIBS += comm
comm_DIR    := libcomm
comm_DEPS   :=
comm_CFLAGS := $(MPI_CFLAGS)
comm_NVCCFLAGS := $(MPI_CFLAGS)
comm_LIBS   := $(MPI_LIBS)
comm_PC_REQUIRES := ompi-c
$(eval $(call strata_library,comm))
