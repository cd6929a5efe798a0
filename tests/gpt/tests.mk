# The serial GPT model: layout of the flat parameters, initialisation, a
# whole-model gradient check against a double-precision reference, learning.
$(eval $(call strata_criterion,test_gpt,$(wildcard tests/gpt/test_*.c),parallel))
