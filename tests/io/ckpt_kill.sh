#!/usr/bin/env bash
# A run killed in the middle of a checkpoint save leaves the previous
# checkpoint complete and loadable; a rank that never reaches a collective
# step inside HDF5 ends the others through the timeout, not a hang.
set -u
BUILD=${BUILD:-build}
dir=$(mktemp -d /tmp/strata-kill-XXXXXX)
trap 'rm -rf "$dir"' EXIT
mpirun --timeout 60 -np 2 --oversubscribe --bind-to none "$BUILD/bin/test_io_ckpt" killsave "$dir" \
  >"$dir/log" 2>&1
rc=$?
if [ $rc = 0 ]; then echo "killsave: expected the job to die, exit 0"; exit 1; fi
[ -f "$dir/ckpt.h5.tmp" ] || { echo "killsave: no partial $dir/ckpt.h5.tmp"; exit 1; }
mpirun --timeout 60 -np 3 --oversubscribe --bind-to none "$BUILD/bin/test_io_ckpt" verify "$dir" || exit 1

# Rank 1 never creates the checkpoint that rank 0 creates with a 1 s
# timeout: rank 0 ends itself with one message naming the file and the
# step, exit 1, well before mpirun's own 60 s limit.
rm -rf "$dir"/*
t0=$(date +%s.%N)
mpirun --timeout 60 -np 2 --oversubscribe --bind-to none "$BUILD/bin/test_io_ckpt" stuck "$dir" \
  >"$dir/log" 2>&1
rc=$?
t=$(echo "$(date +%s.%N) - $t0" | bc)
[ $rc != 0 ] || { echo "stuck: exit 0: $(cat "$dir/log")"; exit 1; }
grep -q "strata: checkpoint '$dir/ckpt.h5': creating its .tmp file did not finish within 1 s" "$dir/log" \
  || { echo "stuck: message: $(cat "$dir/log")"; exit 1; }
grep -q "par_ckpt_create returned" "$dir/log" && { echo "stuck: create returned: $(cat "$dir/log")"; exit 1; }
[ "$(echo "$t < 20" | bc)" = 1 ] || { echo "stuck: took $t s (timeout 1 s)"; exit 1; }
echo "stuck: rank 0 ended itself in $t s"
