# The strata runner: quickstart training tokens/s through the runner over the
# same steps driven directly from C (issue 5: ratio >= 0.95).
STRATA_LUA_LIBSRCS := $(filter-out lua/main.c,$(wildcard lua/*.c)) $(BUILD)/gen/lua_chunks.c
$(eval $(call strata_program,bench_train_quickstart,bench/train_quickstart.c $(STRATA_LUA_LIBSRCS),parallel,$(LUA_CFLAGS) $(BLAS_CFLAGS) -Ilua -DSTRATA_VERSION='"$(VERSION)"',$(LUA_LIBS) $(BLAS_LIBS)))
BENCH_PROGRAMS += 0:$(BUILD)/bin/bench_train_quickstart@300@5
# Elastic runs: from a rank's death to the relaunched run's first step,
# against one checkpoint load plus one step (issue 16: ratio >= 0.5).
BENCH_PROGRAMS += 0:bench/elastic_recovery.sh
