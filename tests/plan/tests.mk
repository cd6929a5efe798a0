# The planner's unit tests (Criterion): formulas, ZeRO's Table 1, layout
# validation, the Megatron calibration, search ordering, reproductions.
$(eval $(call strata_criterion,test_plan,$(wildcard tests/plan/*.c),parallel))
TEST_SUITES += sh:tests/plan/recipes.sh
