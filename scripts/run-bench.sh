#!/usr/bin/env bash
# Runs each benchmark command given as "NP:PROGRAM [ARGS]" (NP=0: no mpirun)
# and passes its BENCH lines through. Figures, not pass/fail.
set -u
BUILD=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
status=0
for b in "$@"; do
  np=${b%%:*}; cmd=${b#*:}; cmd=${cmd//\$BUILD/$BUILD}; cmd=${cmd//@/ }
  if [ "$np" = 0 ]; then
    # shellcheck disable=SC2086
    $cmd || status=1
  else
    # shellcheck disable=SC2086
    mpirun --timeout 600 -np "$np" --bind-to none $cmd || status=1
  fi
done
exit $status
