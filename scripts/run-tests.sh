#!/usr/bin/env bash
# strata's test driver. Arguments are suites:
#   criterion:BINARY   a Criterion binary; its Synthesis line is counted
#   mpi:LISTFILE       lines "NP PROGRAM [ARGS...]" ($BUILD expands), each run
#                      under mpirun --timeout; exit status 0 passes
#   sh:SCRIPT          a shell script; exit status 0 passes
# Prints every failure in full and closes with "tests: N passed, N failed".
set -u
BUILD=${BUILD:-build}
MPI_TIMEOUT=${MPI_TIMEOUT:-180}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI's shared-memory transport polls; with more ranks than cores,
# yielding keeps oversubscribed tests from crawling.
export OMPI_MCA_mpi_yield_when_idle=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
if [ -n "${SANITIZE:-}" ]; then
  # Open MPI's own allocations show up as leaks; MPI programs skip the leak check.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
fi

passed=0; failed=0; failures=()
log=$(mktemp); trap 'rm -f "$log"' EXIT

run_criterion() {
  local bin=$1
  echo "== $bin"
  "$bin" -j2 >"$log" 2>&1
  local rc=$?
  local syn; syn=$(grep -a 'Synthesis:' "$log" | tail -n 1)
  local t p f c
  t=$(sed -n 's/.*Tested: \([0-9]*\).*/\1/p' <<<"$syn")
  p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$syn")
  f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$syn")
  c=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$syn")
  if [ -z "$syn" ]; then
    cat "$log"; failed=$((failed + 1)); failures+=("$bin (no Synthesis line, exit $rc)"); return
  fi
  passed=$((passed + p)); failed=$((failed + f + c))  # a crash is a failure too
  echo "   $syn"
  if [ "$f" != 0 ] || [ "$c" != 0 ] || [ $rc != 0 ]; then
    grep -a -v '^\[----\] *$' "$log" | grep -a -E 'FAIL|CRASH|Assertion|error|failed' | head -60
    failures+=("$bin ($f failing, $c crashing)")
  fi
}

run_one() {  # name, command...
  local name=$1; shift
  local t0=$SECONDS
  "$@" >"$log" 2>&1 </dev/null  # mpirun would otherwise eat the list being read
  local rc=$?
  if [ $rc = 0 ]; then
    passed=$((passed + 1)); printf '   ok   %-58s %3ds\n' "$name" $((SECONDS - t0))
  else
    failed=$((failed + 1)); failures+=("$name (exit $rc)")
    printf '   FAIL %-58s exit %d\n' "$name" $rc
    tail -n 40 "$log" | sed 's/^/        /'
  fi
}

run_mpi_list() {
  local list=$1
  echo "== $list"
  while read -r np prog args; do
    case "$np" in ''|'#'*) continue ;; esac
    prog=${prog//\$BUILD/$BUILD}; args=${args//\$BUILD/$BUILD}
    # shellcheck disable=SC2086
    run_one "np=$np $(basename "$prog") $args" \
      mpirun --timeout "$MPI_TIMEOUT" -np "$np" --bind-to none "$prog" $args
  done <"$list"
}

for suite in "$@"; do
  kind=${suite%%:*}; what=${suite#*:}
  case "$kind" in
    criterion) run_criterion "$what" ;;
    mpi) run_mpi_list "$what" ;;
    sh) echo "== $what"; run_one "$what" env BUILD="$BUILD" bash "$what" ;;
    *) echo "run-tests: unknown suite kind '$kind' in '$suite'" >&2; failed=$((failed + 1)) ;;
  esac
done

if [ ${#failures[@]} -gt 0 ]; then
  echo; echo "failures:"; printf '  %s\n' "${failures[@]}"
fi
echo "tests: $passed passed, $failed failed"
[ "$failed" = 0 ] && [ ${#failures[@]} = 0 ]
