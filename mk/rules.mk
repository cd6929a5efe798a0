# Templates every lib.mk / tests.mk uses. Read this once; the fragments are short.
#
# A library fragment (libX/lib.mk) sets, then calls strata_library:
#   LIBS        += X
#   X_DIR       := libX
#   X_DEPS      := strata libraries it builds on, dependents first (e.g. "tensor comm")
#   X_CFLAGS    := extra compile flags (e.g. $(MPI_CFLAGS))
#   X_LIBS      := external link flags (e.g. $(MPI_LIBS))
#   X_PC_REQUIRES := pkg-config modules its public header needs (e.g. ompi-c)
#   X_PC_REQUIRES_PRIVATE := pkg-config modules only its code links (e.g. openblas)
#   X_OPENMP    := 1 when its code uses OpenMP (static consumers then link
#                  $(OPENMP_LIBS), the runtime -fopenmp brings)
#   $(eval $(call strata_library,X))
# It compiles libX/src/*.c and libX/src/*/*.c (one folder per part; CUDA
# sources in a cuda/ folder beside them, when CUDA is on) into
# $(BUILD)/lib/libstrata_X.a and .so (which finds the strata libraries it
# needs beside itself: rpath $ORIGIN, wherever they are installed). A library sees only include/ (the shared
# status header), its own include/ and src/, and its declared deps' include/.

LIBS         :=
INSTALL_TARGETS :=
ALL_TARGETS  :=
TEST_SUITES  :=
BENCH_PROGRAMS :=
GPU_TESTS    :=
GPU_MPI_TESTS :=
GPU_BENCH    :=
RUN_COMMAND  := @echo "strata: no main job yet"

# Link flags for a program using the given strata libraries (dependents first):
# static archives, their deps' archives, then every external library once.
strata_archives = $(foreach l,$(1),$(BUILD)/lib/libstrata_$(l).a) \
                  $(foreach l,$(1),$(foreach d,$($(l)_DEPS),$(BUILD)/lib/libstrata_$(d).a))
strata_extlibs  = $(sort $(foreach l,$(1),$($(l)_LIBS) $(foreach d,$($(l)_DEPS),$($(d)_LIBS)))) \
                  $(if $(filter 1,$(HAVE_CUDA)),$(CUDA_LIBS)) -lm
strata_incs     = $(foreach l,$(1),-I$($(l)_DIR)/include $(foreach d,$($(l)_DEPS),-I$($(d)_DIR)/include)) \
                  $(foreach l,$(1),$($(l)_CFLAGS) $(foreach d,$($(l)_DEPS),$($(d)_CFLAGS)))

define strata_library
$(1)_SRCS := $$(wildcard $$($(1)_DIR)/src/*.c $$($(1)_DIR)/src/*/*.c)
$(1)_CU   := $$(if $$(filter 1,$$(HAVE_CUDA)),$$(wildcard $$($(1)_DIR)/src/cuda/*.cu $$($(1)_DIR)/src/*/cuda/*.cu))
$(1)_OBJS := $$(patsubst %.c,$$(BUILD)/obj/%.o,$$($(1)_SRCS)) \
             $$(patsubst %.cu,$$(BUILD)/obj/%.cu.o,$$($(1)_CU))
$(1)_INC  := -I$$($(1)_DIR)/include -I$$($(1)_DIR)/src \
             $$(foreach d,$$($(1)_DEPS),-I$$($$(d)_DIR)/include)
$(1)_LINK := $$($(1)_LIBS) $$(foreach d,$$($(1)_DEPS),$$($$(d)_LIBS)) \
             $$(if $$(filter 1,$$(HAVE_CUDA)),$$(CUDA_LIBS))

$$(BUILD)/obj/$$($(1)_DIR)/%.o: $$($(1)_DIR)/%.c
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS_ALL) $$($(1)_INC) $$(foreach d,$$($(1)_DEPS),$$($$(d)_CFLAGS)) $$($(1)_CFLAGS) -MMD -MP -c $$< -o $$@
$$(BUILD)/obj/$$($(1)_DIR)/%.cu.o: $$($(1)_DIR)/%.cu
	@mkdir -p $$(@D)
	$$(NVCC) $$(NVCCFLAGS) $$($(1)_INC) $$($(1)_NVCCFLAGS) -MMD -MP -c $$< -o $$@
$$(BUILD)/lib/libstrata_$(1).a: $$($(1)_OBJS)
	@mkdir -p $$(@D)
	@rm -f $$@
	ar rcs $$@ $$^
$$(BUILD)/lib/libstrata_$(1).so: $$($(1)_OBJS) $$(foreach d,$$($(1)_DEPS),$$(BUILD)/lib/libstrata_$$(d).so)
	@mkdir -p $$(@D)
	$$(CC) -shared -Wl,-soname,libstrata_$(1).so -Wl,-rpath,'$$$$ORIGIN' -o $$@ $$($(1)_OBJS) \
	  -L$$(BUILD)/lib $$(foreach d,$$($(1)_DEPS),-lstrata_$$(d)) $$($(1)_LINK) -lm $$(LDFLAGS_ALL)
ALL_TARGETS += $$(BUILD)/lib/libstrata_$(1).a $$(BUILD)/lib/libstrata_$(1).so
INSTALL_TARGETS += install-$(1)
install-$(1): $$(BUILD)/lib/libstrata_$(1).a $$(BUILD)/lib/libstrata_$(1).so
	install -d $$(DESTDIR)$$(PREFIX)/lib/pkgconfig $$(DESTDIR)$$(PREFIX)/include/strata
	install -m 644 $$(BUILD)/lib/libstrata_$(1).a $$(DESTDIR)$$(PREFIX)/lib/
	install -m 755 $$(BUILD)/lib/libstrata_$(1).so $$(DESTDIR)$$(PREFIX)/lib/
	install -m 644 $$($(1)_DIR)/include/strata/*.h include/strata/*.h $$(DESTDIR)$$(PREFIX)/include/strata/
	scripts/write-pc.sh "$$(PREFIX)" strata-$(1) libstrata_$(1) "$$(VERSION)" \
	  "$$(strip $$($(1)_PC_REQUIRES) $$(foreach d,$$($(1)_DEPS),strata-$$(d)))" \
	  "$$(strip $$($(1)_PC_REQUIRES_PRIVATE))" \
	  "$$(strip $$($(1)_LIBS) $$(if $$(filter 1,$$($(1)_OPENMP)),$$(OPENMP_LIBS)) $$(if $$(filter 1,$$(HAVE_CUDA)),$$(CUDA_LIBS)))" \
	  >$$(DESTDIR)$$(PREFIX)/lib/pkgconfig/strata-$(1).pc
.PHONY: install-$(1)
-include $$($(1)_OBJS:.o=.d)
endef

# A program: $(eval $(call strata_program,NAME,SOURCES,LIBS[,EXTRA_CFLAGS,EXTRA_LIBS]))
# builds $(BUILD)/bin/NAME from SOURCES, linked statically against the strata LIBS.
define strata_program
$$(BUILD)/bin/$(1): $(2) $$(call strata_archives,$(3))
	@mkdir -p $$(@D)
	$$(CC) $$(CFLAGS_ALL) -Itests $$(call strata_incs,$(3)) $(4) -o $$@ $(2) \
	  $$(call strata_archives,$(3)) $$(call strata_extlibs,$(3)) $(5) $$(LDFLAGS_ALL)
ALL_TARGETS += $$(BUILD)/bin/$(1)
endef

# A Criterion suite: $(eval $(call strata_criterion,NAME,SOURCES,LIBS[,EXTRA_CFLAGS,EXTRA_LIBS]))
define strata_criterion
$$(eval $$(call strata_program,$(1),$(2),$(3),$$(CRIT_CFLAGS) $(4),$$(CRIT_LIBS) $(5)))
TEST_SUITES += criterion:$$(BUILD)/bin/$(1)
endef
