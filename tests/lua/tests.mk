# tests/lua: the strata executable, its Lua bindings and the recipe schema.
TEST_SUITES += mpi:tests/lua/mpi.list sh:tests/lua/bad_recipes.sh sh:tests/lua/cli.sh
TEST_SUITES += sh:tests/lua/train.sh sh:tests/lua/models.sh sh:tests/lua/large_batch.sh sh:tests/lua/runs.sh
TEST_SUITES += sh:tests/lua/elastic.sh

# Failure cases end to end (tests/lua/failures.sh); fullfs.so stands in for a
# small disk where a tmpfs cannot be mounted.
$(BUILD)/lib/test_fullfs.so: tests/lua/fullfs.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $< -ldl
ALL_TARGETS += $(BUILD)/lib/test_fullfs.so
TEST_SUITES += sh:tests/lua/failures.sh

# Out of memory at every allocation of strata's code (tests/lua/failalloc.sh);
# failalloc.so fails the chosen allocation by LD_PRELOAD.
$(BUILD)/lib/test_failalloc.so: tests/lua/failalloc.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $<
ALL_TARGETS += $(BUILD)/lib/test_failalloc.so
TEST_SUITES += sh:tests/lua/failalloc.sh
