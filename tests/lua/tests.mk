# tests/lua: the strata executable, its Lua bindings and the recipe schema.
TEST_SUITES += mpi:tests/lua/mpi.list sh:tests/lua/bad_recipes.sh sh:tests/lua/cli.sh
TEST_SUITES += sh:tests/lua/train.sh sh:tests/lua/models.sh

# Failure cases end to end (tests/lua/failures.sh); fullfs.so stands in for a
# small disk where a tmpfs cannot be mounted.
$(BUILD)/lib/test_fullfs.so: tests/lua/fullfs.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $< -ldl
ALL_TARGETS += $(BUILD)/lib/test_fullfs.so
TEST_SUITES += sh:tests/lua/failures.sh
