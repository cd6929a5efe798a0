# tests/lua: the strata executable, its Lua bindings and the recipe schema.
TEST_SUITES += mpi:tests/lua/mpi.list sh:tests/lua/bad_recipes.sh sh:tests/lua/cli.sh
TEST_SUITES += sh:tests/lua/train.sh
