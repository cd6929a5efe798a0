# Toolchain and flags. Override on the command line: make CC=clang ARCH=...
VERSION    := 0.1.0
PREFIX     ?= /usr/local
SANITIZE   ?=
BUILD      ?= $(if $(SANITIZE),build-san,build)
# Exported so that recipe lines and the test/bench drivers see the same folder.
export BUILD
CC         ?= gcc
ARCH       ?= -march=x86-64-v3
OPT        ?= -O3
CSTD       := -std=gnu11
WARN       := -Wall -Wextra -Werror -Wno-unused-parameter
CFLAGS_ALL := $(CSTD) $(OPT) -g $(ARCH) $(WARN) -fPIC -fvisibility=hidden -fopenmp \
              -Iinclude $(EXTRA_CFLAGS)
LDFLAGS_ALL := -fopenmp $(EXTRA_LDFLAGS)
# The OpenMP runtime that -fopenmp links (GCC's), for the static archives'
# pkg-config files: a consumer links it without compiling with -fopenmp.
OPENMP_LIBS ?= -lgomp
ifneq ($(SANITIZE),)
  CFLAGS_ALL  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
  LDFLAGS_ALL += -fsanitize=$(SANITIZE)
endif

PKG_MPI      := ompi-c
PKG_HDF5     := hdf5-openmpi
MPI_CFLAGS   := $(shell pkg-config --cflags $(PKG_MPI) 2>/dev/null)
MPI_LIBS     := $(shell pkg-config --libs $(PKG_MPI) 2>/dev/null)
HDF5_CFLAGS  := $(shell pkg-config --cflags $(PKG_HDF5) 2>/dev/null)
HDF5_LIBS    := $(shell pkg-config --libs $(PKG_HDF5) 2>/dev/null) -lhdf5_hl
LUA_CFLAGS   := $(shell pkg-config --cflags lua5.4 2>/dev/null)
LUA_LIBS     := $(shell pkg-config --libs lua5.4 2>/dev/null) -lm -ldl
BLAS_CFLAGS  := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS    := $(shell pkg-config --libs openblas 2>/dev/null)
CRIT_CFLAGS  := $(shell pkg-config --cflags criterion 2>/dev/null)
CRIT_LIBS    := $(shell pkg-config --libs criterion 2>/dev/null)

# CUDA: auto (built when nvcc is found), 1 (required), 0 (off).
CUDA       ?= auto
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard $(CUDA_HOME)/bin/nvcc))
ifeq ($(CUDA),auto)
  HAVE_CUDA := $(if $(NVCC),1,0)
else ifeq ($(CUDA),1)
  ifeq ($(NVCC),)
    $(error CUDA=1 but nvcc was not found (looked in PATH and $(CUDA_HOME)/bin))
  endif
  HAVE_CUDA := 1
else
  HAVE_CUDA := 0
endif
CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
              -gencode arch=compute_90,code=compute_90
NVCCFLAGS  := -O3 -std=c++17 $(CUDA_ARCHS) -Werror all-warnings -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Wno-unused-parameter,-Werror \
              -Iinclude -I$(CUDA_HOME)/include -DSTRATA_CUDA=1 -DOMPI_SKIP_MPICXX=1 $(EXTRA_NVCCFLAGS)
CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl -ldl \
              -lcudart -lstdc++
ifeq ($(HAVE_CUDA),1)
  CFLAGS_ALL += -DSTRATA_CUDA=1 -I$(CUDA_HOME)/include
endif
