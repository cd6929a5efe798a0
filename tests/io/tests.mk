# tests/io: data, metrics and checkpoints of libparallel (strata/par_io.h).
$(eval $(call strata_criterion,test_io_data,tests/io/test_io_data.c tests/io/test_io_metrics.c tests/io/test_io_tokenizer.c tests/io/test_io_deadline.c,parallel))
$(eval $(call strata_program,test_io_ckpt,tests/io/test_io_ckpt.c,parallel))
TEST_SUITES += mpi:tests/io/mpi.list sh:tests/io/ckpt_kill.sh
$(eval $(call strata_program,model_files,tests/io/model_files.c,parallel))
