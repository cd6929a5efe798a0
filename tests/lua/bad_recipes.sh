#!/usr/bin/env bash
# Bad recipes: each tests/lua/bad/*.lua starts with
#   -- expect: STATUS MESSAGE      (exit status, a substring of the error line)
#   -- command: plan               (optional: `strata plan` instead of `strata run`)
#   -- args: key=value ...         (optional command-line overrides)
#   -- launch: -n N [--hostfile F] (optional: strata's own launch; hostfile
#                                   hosts4 holds two simulated machines of 2 slots)
# and must make `strata run` (or `strata plan`) print exactly one line on
# stderr containing MESSAGE and exit with STATUS, without writing anything
# under runs/.
# Also checks the command line itself (unknown command, bad overrides).
set -u
BUILD=${BUILD:-build}
S=$(cd "$BUILD/bin" && pwd)/strata
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/strata-bad-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0; n=0
printf 'nodeA slots=2\nnodeB slots=2\n' >"$work/hosts4"
export STRATA_SIMULATE_NODES=1 # (only hostfiles name machines)

check() { # name, expected status, expected substring, command...
  local name=$1 want=$2 msg=$3; shift 3
  n=$((n + 1))
  (cd "$work" && "$@") >"$work/out" 2>"$work/err"
  local rc=$?
  local lines; lines=$(wc -l <"$work/err")
  if [ "$rc" != "$want" ] || ! grep -qF -- "$msg" "$work/err" || [ "$lines" != 1 ]; then
    fails=$((fails + 1))
    echo "FAIL $name: exit $rc (want $want), $lines stderr line(s), want: $msg"
    sed 's/^/     | /' "$work/err" | head -8
  fi
  if [ -e "$work/runs" ]; then
    fails=$((fails + 1)); echo "FAIL $name: wrote $work/runs"; rm -rf "$work/runs"
  fi
}

for f in "$here"/bad/*.lua; do
  want=$(sed -n '1s/^-- expect: \([0-9]*\) .*/\1/p' "$f")
  msg=$(sed -n '1s/^-- expect: [0-9]* \(.*\)/\1/p' "$f")
  args=$(sed -n '2,4s/^-- args: //p' "$f")
  cmd=$(sed -n '2,4s/^-- command: //p' "$f")
  launch=$(sed -n '2,4s/^-- launch: //p' "$f")
  # shellcheck disable=SC2086
  check "$(basename "$f")" "$want" "$msg" "$S" "${cmd:-run}" $launch "$f" $args
done
check "unknown command" 2 "strata: unknown command 'trian' (commands: run, plan, sample, eval, convert, info, plot, help, version)" "$S" trian
check "no recipe" 2 "strata run: no recipe given" "$S" run
check "missing recipe" 2 "strata run: cannot read recipe 'nope.lua': No such file or directory" "$S" run nope.lua
check "override without =" 2 "strata run: 'steps' is not a key=value override" "$S" run "$here/bad/fanout_zero.lua" steps
check "bad -n" 2 "strata run: -n needs a positive number of ranks" "$S" run -n zero x.lua
check "more ranks than slots" 2 "strata run: -n 6 is more than the 4 slots of hostfile hosts4 (nodeA 2, nodeB 2)" \
  "$S" run -n 6 --hostfile hosts4 "$here/bad/fanout_zero.lua"
check "more ranks than Slurm's" 2 "strata run: -n 3 is more than the 2 slots of the Slurm allocation (SLURM_NTASKS = 2)" \
  env SLURM_NTASKS=2 "$S" run -n 3 "$here/bad/fanout_zero.lua"
printf 'nodeA slots=two\n' >"$work/badhosts"
check "bad slots" 2 "strata run: badhosts:1: 'slots=two': slots must be a positive number" \
  "$S" run -n 2 --hostfile badhosts "$here/bad/fanout_zero.lua"
check "plot missing file" 1 "strata plot: metrics 'none.h5': No such file or directory" "$S" plot none.h5 -o x.png
check "plot without -o" 2 "strata plot: usage" "$S" plot m.h5
# Under mpirun (2 ranks) the error is still one line, once, with the same status.
check "2 ranks: schema" 2 "heads_not_dividing.lua:4: model.heads = 5: does not divide model.hidden = 64" \
  "$S" run -n 2 "$here/bad/heads_not_dividing.lua"
check "2 ranks: data" 1 "data file '/nonexistent/strata/corpus.txt': No such file or directory" \
  "$S" run -n 2 "$here/bad/missing_data_file.lua"
# A layout that only the ranks decide: interleaved microbatches per step not a multiple of pp.
cat >"$work/interleaved.lua" <<'LUA'
local strata = require "strata"
strata.experiment{
  parallel = {pp = 2, schedule = "interleaved", interleave = 2, microbatches = 3},
  model = {layers = 4},
}
LUA
check "2 ranks: interleaved microbatches" 2 \
  "interleaved.lua:3: parallel.microbatches = 3: the interleaved schedule needs microbatches per step (3) a multiple of parallel.pp = 2" \
  "$S" run -n 2 "$work/interleaved.lua"
echo "bad recipes: $n checked, $fails failed"
[ "$fails" = 0 ]
