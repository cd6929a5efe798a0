# strata: top-level build. Everything goes out of tree into $(BUILD).
#
#   make                 libraries, tests, benchmarks, the strata executable
#   make test            install missing packages, build, run every CI test
#   make run             the main job (see README.md)
#   make bench           print BENCH lines (figures, not pass/fail)
#   make test-gpu        CUDA tests on a GPU machine (bundle built here)
#   make install PREFIX=/usr/local   libraries, headers, pkg-config files, bin/strata
#   make SANITIZE=address,undefined test
#   make CUDA=0 | CUDA=1 (auto by default: CUDA paths built when nvcc is found)
#
# Each library folder has a lib.mk that declares its sources and dependencies
# (see mk/rules.mk); tests/<lib>/tests.mk declares its tests. The dependency DAG
# (README.md, "Libraries and their dependencies") is enforced here: a library
# sees only its own headers and the headers of the libraries it declares, and
# `make check-deps` (part of `make test`) checks the sources.

.DEFAULT_GOAL := all
include mk/config.mk
include mk/rules.mk

# Libraries in dependency order.
LIB_FRAGMENTS := $(wildcard libcomm/lib.mk libtensor/lib.mk liboptim/lib.mk \
                   liboffload/lib.mk libparallel/lib.mk)
include $(LIB_FRAGMENTS)
include $(sort $(wildcard tests/*/tests.mk bench/*.mk lua/lua.mk))

all: $(ALL_TARGETS)

deps:
	@scripts/install-deps.sh

# The test driver runs Criterion binaries and multi-rank programs and prints
# one closing line "tests: N passed, N failed".
test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory check-deps
	@BUILD=$(BUILD) SANITIZE=$(SANITIZE) scripts/run-tests.sh $(TEST_SUITES)

bench: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) scripts/run-bench.sh $(BENCH_PROGRAMS)

# GPU tests and benchmarks go into one self-contained folder, $(BUILD)/gpu,
# which also runs on a GPU machine without strata's other dependencies.
gpu-bundle: all
	@scripts/gpu-bundle.sh $(BUILD)/gpu "$(GPU_TESTS)" "$(GPU_BENCH)" "$(GPU_MPI_TESTS)"

test-gpu: deps
	@$(MAKE) --no-print-directory gpu-bundle
	@$(BUILD)/gpu/run.sh

bench-gpu: deps
	@$(MAKE) --no-print-directory gpu-bundle
	@$(BUILD)/gpu/run.sh bench

run: deps
	@$(MAKE) --no-print-directory all
	@$(RUN_COMMAND)

# The dependency DAG, checked on the sources themselves: libcomm, libtensor,
# liboptim and liboffload include no other strata library.
check-deps:
	@scripts/check-deps.sh

install: all $(INSTALL_TARGETS)
	@echo "strata: installed $(LIBS) and bin/strata under $(PREFIX) (pkg-config: strata-<lib>)"

clean:
	rm -rf build build-*

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

.PHONY: all deps test bench run install clean format check-deps gpu-bundle test-gpu bench-gpu
