# libtensor unit tests: finite-difference checks of every backward against
# double-precision references, RNG sharding, errors, memory accounting.
$(eval $(call strata_criterion,test_tensor,$(wildcard tests/tensor/test_*.c),tensor))
$(eval $(call strata_program,tensor_readme_example,tests/tensor/readme_example.c,tensor))
TEST_SUITES += sh:tests/tensor/readme_example.sh
