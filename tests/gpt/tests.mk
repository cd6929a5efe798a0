# The serial GPT model: layout of the flat parameters, initialisation, a
# whole-model gradient check against a double-precision reference, learning.
$(eval $(call strata_criterion,test_gpt,$(wildcard tests/gpt/test_*.c),parallel))
$(eval $(call strata_program,gpt_example_train,tests/gpt/example_train.c,parallel))
TEST_SUITES += sh:tests/gpt/example_train.sh
# Megatron tensor parallelism in the model against the serial model.
$(eval $(call strata_program,tp_equiv,tests/gpt/tp_equiv.c,parallel))
TEST_SUITES += mpi:tests/gpt/mpi.list
# Ring self-attention over the sequence-split group against the serial attention.
$(eval $(call strata_program,ring_equiv,tests/gpt/ring_equiv.c,parallel))
# 2D tensor parallelism's SUMMA product against the whole product.
$(eval $(call strata_program,summa_equiv,tests/gpt/summa_equiv.c,parallel))
# 3D tensor parallelism's matrix product against the whole product.
$(eval $(call strata_program,mm3d_equiv,tests/gpt/mm3d_equiv.c,parallel))
# One transformer layer under 1D, 2D, 2.5D and 3D tensor parallelism against the serial layer.
$(eval $(call strata_program,tplayer_equiv,tests/gpt/tplayer_equiv.c,parallel))
# The GPT model under 2D, 2.5D and 3D tensor parallelism against the serial model.
$(eval $(call strata_program,tpgpt_equiv,tests/gpt/tpgpt_equiv.c,parallel))
# The multi-dimensional pieces' device checks: blocks on another device refused by name (one rank, any machine).
$(eval $(call strata_program,tp_device_args,tests/gpt/tp_device_args.c,parallel))
