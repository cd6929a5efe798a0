# tests/io: data, metrics and checkpoints of libparallel (strata/par_io.h).
$(eval $(call strata_criterion,test_io_data,tests/io/test_io_data.c,parallel))
