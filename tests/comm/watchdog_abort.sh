#!/usr/bin/env bash
# With on_timeout = abort, a collective that a rank never joins ends the whole
# job with a non-zero status and the watchdog's report on stderr.
set -u
BUILD=${BUILD:-build}
out=$(mpirun --timeout 60 -np 3 --bind-to none "$BUILD/bin/comm_watchdog" abort 2>&1)
rc=$?
if [ $rc = 0 ]; then echo "expected a non-zero exit, got 0"; echo "$out"; exit 1; fi
if [ $rc = 110 ]; then echo "mpirun timed out: the watchdog did not abort"; echo "$out"; exit 1; fi
grep -q "watchdog: allreduce #0 on communicator 'grads'" <<<"$out" &&
  grep -q "Not arrived (no answer: outside libcomm or hung): ranks 2" <<<"$out" &&
  grep -q "Aborting the job" <<<"$out" || { echo "report missing:"; echo "$out"; exit 1; }
echo "watchdog abort: ok (exit $rc)"
