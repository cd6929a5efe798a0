TEST_SUITES += sh:tests/consumer/install.sh
# Until the strata runner lands, `make run` runs the libcomm example on 2 and 4 ranks.
RUN_COMMAND := OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 BUILD=$(BUILD) bash tests/consumer/install.sh
