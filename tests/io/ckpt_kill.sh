#!/usr/bin/env bash
# A run killed in the middle of a checkpoint save leaves the previous
# checkpoint complete and loadable.
set -u
BUILD=${BUILD:-build}
dir=$(mktemp -d /tmp/strata-kill-XXXXXX)
trap 'rm -rf "$dir"' EXIT
mpirun --timeout 60 -np 2 --oversubscribe --bind-to none "$BUILD/bin/test_io_ckpt" killsave "$dir" \
  >"$dir/log" 2>&1
rc=$?
if [ $rc = 0 ]; then echo "killsave: expected the job to die, exit 0"; exit 1; fi
[ -f "$dir/ckpt.h5.tmp" ] || { echo "killsave: no partial $dir/ckpt.h5.tmp"; exit 1; }
mpirun --timeout 60 -np 3 --oversubscribe --bind-to none "$BUILD/bin/test_io_ckpt" verify "$dir"
