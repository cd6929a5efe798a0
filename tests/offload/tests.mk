# liboffload's tests: tiers, states, eviction against a brute-force optimum, NVMe.
$(eval $(call strata_criterion,test_offload,tests/offload/test_offload.c,offload))
TEST_SUITES += sh:tests/offload/consumer.sh
