#!/usr/bin/env bash
# Out of memory, everywhere strata allocates: tests/lua/failalloc.c fails
# the N-th allocation of strata's own code (FAILALLOC_NTH), or every one
# from the N-th on (FAILALLOC_FROM: the heap stays exhausted, error paths
# included), in a short training run that saves a checkpoint and metrics.
# For every N, the run either completes (exit 0) or ends with exit 1 and one
# line on stderr that says "out of memory", leaving no partial checkpoint:
# never a crash, a hang or a silent wrong result.
#   Runs: the default layout (every allocation, both modes), and fp16
#   ZeRO-3 with gradient accumulation (every 8th allocation).
set -u
BUILD=${BUILD:-build}
S=$(cd "$BUILD/bin" && pwd)/strata
LIB=$(cd "$BUILD/lib" && pwd)/test_failalloc.so
work=$(mktemp -d /tmp/strata-failalloc-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export STRATA_THREADS=1
R=recipes/quickstart.lua
base=(model.layers=1 model.hidden=32 model.heads=2 model.seq=32 data.tokens=65536 train.batch=4
      optim.warmup=2 train.steps=3 train.eval_every=0 metrics.plot=false)

# sweep NAME STRIDE ARGS...: counts the run's allocations, then fails each
# STRIDE-th one in turn (and, every 4 STRIDE-th, all from it on).
sweep() {
  local name=$1 stride=$2; shift 2
  local d=$work/$name n total ran=0 failed=0
  total=$(FAILALLOC_COUNT=1 LD_PRELOAD=$LIB "$S" run $R "${base[@]}" "$@" run_dir="$d" 2>&1 >/dev/null |
          sed -n 's/^failalloc: \([0-9]*\) allocations$/\1/p' | sort -n | tail -1)
  [ "${total:-0}" -gt 10 ] || { fail "$name: counted ${total:-no} allocations"; return; }
  for ((n = 1; n <= total + 2; n += stride)); do
    for mode in NTH FROM; do
      [ $mode = FROM ] && [ $(((n - 1) % (4 * stride))) != 0 ] && continue
      rm -rf "$d"
      env FAILALLOC_$mode=$n LD_PRELOAD="$LIB" timeout 60 "$S" run $R "${base[@]}" "$@" run_dir="$d" \
        >"$work/out" 2>"$work/err"
      local rc=$? lines
      ran=$((ran + 1))
      [ $rc = 0 ] && continue
      failed=$((failed + 1))
      lines=$(grep -vc '^step ' "$work/err")
      if [ $rc != 1 ] || [ "$lines" != 1 ] || ! grep -q "^strata: .*out of memory" "$work/err"; then
        fail "$name: allocation $n ($mode): exit $rc, $lines line(s): $(grep -v '^step ' "$work/err" | head -3)"
      fi
      if ls "$d"/*.tmp >/dev/null 2>&1; then fail "$name: allocation $n ($mode): left $(ls "$d"/*.tmp)"; fi
    done
  done
  # the injection must have bitten: most failed allocations end the run
  [ $((failed * 2)) -gt "$ran" ] || fail "$name: only $failed of $ran runs ended out of memory: is the allocation failing at all?"
  echo "failalloc $name: $total allocations; $ran runs, $failed ended out of memory with one line, none crashed"
}

sweep default 1
sweep fp16-zero3 8 parallel.zero=3 parallel.precision=fp16 train.accum=2

echo "failalloc: $fails failed"
[ $fails = 0 ]
