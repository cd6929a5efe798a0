TEST_SUITES += sh:tests/consumer/install.sh
