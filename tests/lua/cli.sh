#!/usr/bin/env bash
# The strata command line: help, info, plot, and run -n N starting mpirun.
set -u
BUILD=${BUILD:-build}
S=$(cd "$BUILD/bin" && pwd)/strata
work=$(mktemp -d /tmp/strata-cli-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$S" help >"$work/help" 2>&1 || fail "help exits $?"
grep -q 'strata run \[-n N \[--hostfile FILE\]\] RECIPE.lua' "$work/help" || fail "help text"
"$S" info >"$work/info" 2>&1 || fail "info exits $?"
for k in 'MPI ' 'HDF5 ' 'Lua ' 'OpenBLAS ' 'CUDA ' 'NCCL ' 'device ' 'threads '; do
  grep -q "^$k" "$work/info" || fail "info lacks '$k': $(cat "$work/info")"
done
# Threads = cores / ranks on the node (STRATA_THREADS overrides).
STRATA_THREADS=3 "$S" info | grep -q '^threads   3 per rank' || fail "STRATA_THREADS"
# --version: one line, the version the build was made with (as info's first line names it)
v=$("$S" --version) || fail "--version exits $?"
[ "$v" = "$(head -1 "$work/info" | sed -n 's/^\(strata [^ ]*\).*/\1/p')" ] || fail "--version: '$v', info: $(head -1 "$work/info")"
OMPI_COMM_WORLD_LOCAL_SIZE=64 "$S" info | grep -q '^threads   1 per rank' || fail "threads with 64 local ranks"

# plot: a metrics file written through the Lua bindings, drawn by gnuplot,
# one panel per unit (a metric's unit attribute; the losses' known unit
# when the file records none; else a panel of its own).
cat >"$work/make_metrics.lua" <<LUA
local strata = require "strata"
local m = assert(strata.metrics.create("$work/m.h5", {"step", "loss", "val_loss", "lr", "mem", "comm", "odd"}))
for s = 1, 50 do
  assert(m:append{step = s, loss = 3 / s + 1, val_loss = s % 10 == 0 and 3 / s + 1.1 or nil, lr = 0.01 / s,
                  mem = 1e6 + s, comm = 1e5 * s, odd = s % 3})
end
assert(m:unit("lr", "learning rate") and m:unit("mem", "bytes") and m:unit("comm", "bytes"))
assert(m:attr("name", "cli test"))
assert(m:attr("entropy_rate", "1.0"))
m:close()
assert(strata.metrics.unit("$work/m.h5", "mem") == "bytes")
assert(select(3, strata.metrics.unit("$work/m.h5", "loss")) == -13) -- none recorded: not found
LUA
"$S" run "$work/make_metrics.lua" || fail "writing metrics"
"$S" plot "$work/m.h5" -o "$work/loss.png" || fail "plot exits $?"
[ "$(head -c 4 "$work/loss.png" | od -An -c | tr -d ' ')" = '211PNG' ] || fail "loss.png is not a PNG"
"$S" plot "$work/m.h5" step -o "$work/step.png" || fail "plot of a named metric"
"$S" plot "$work/m.h5" loss lr val_loss mem odd comm -o "$work/all.gp" || fail "plot script exits $?"
[ "$(grep -c '^plot ' "$work/all.gp")" = 4 ] && grep -q '^set multiplot layout 4,1 title "cli test"' "$work/all.gp" \
  || fail "plot: not one panel per unit: $(grep -v '^[0-9N]' "$work/all.gp")"
panels=$(grep -A1 '^set ylabel' "$work/all.gp" | grep -o "^set ylabel '[^']*'\|title '[a-z_ ]*'" | sed "s/.*'\(.*\)'/\1/" | tr '\n' ,)
[ "$panels" = "nats/token,loss,val_loss,entropy rate of the source,learning rate,lr,bytes,mem,comm,odd,odd," ] \
  || fail "plot panels: $panels"
grep -q "^set output '$work/all.png'" "$work/all.gp" || fail "plot script: output $(grep '^set output' "$work/all.gp")"
if command -v gnuplot >/dev/null; then
  gnuplot "$work/all.gp" && [ -s "$work/all.png" ] || fail "gnuplot of the plot script"
  "$S" plot "$work/m.h5" loss lr mem -o "$work/three.png" && [ -s "$work/three.png" ] || fail "plot of three panels"
fi
"$S" plot "$work/m.h5" nope -o "$work/x.png" 2>"$work/err"; rc=$?
[ $rc = 2 ] && [ "$(cat "$work/err")" = "strata plot: metrics '$work/m.h5': no metric named 'nope' (it has: comm, loss, lr, mem, odd, step, val_loss)" ] \
  || fail "plot of an unknown metric: $rc $(cat "$work/err")"
[ ! -e "$work/x.png" ] || fail "plot of an unknown metric wrote a file"

# run -n 2 starts mpirun itself; the bindings test then sees 2 ranks.
"$S" run -n 2 tests/lua/test_bindings.lua >"$work/np2" 2>&1 || fail "run -n 2: $(tail -5 "$work/np2")"
[ "$(grep -c 'of 2, .* checks passed' "$work/np2")" = 2 ] || fail "run -n 2 did not run 2 ranks: $(cat "$work/np2")"
# --hostfile goes to mpirun (here one machine of 2 slots): the bindings test sees 2 ranks; without -n,
# or with a file that cannot be read, it is refused (exit 2)
printf 'localhost slots=2\n' >"$work/hosts"
"$S" run -n 2 --hostfile "$work/hosts" tests/lua/test_bindings.lua >"$work/hf" 2>&1 || fail "run --hostfile: $(tail -5 "$work/hf")"
[ "$(grep -c 'of 2, .* checks passed' "$work/hf")" = 2 ] || fail "run --hostfile did not run 2 ranks: $(cat "$work/hf")"
"$S" run --hostfile "$work/hosts" tests/lua/test_bindings.lua 2>"$work/err"; rc=$?
[ $rc = 2 ] && grep -q -- "--hostfile goes with -n N" "$work/err" || fail "--hostfile without -n: $rc $(cat "$work/err")"
"$S" run -n 2 --hostfile "$work/none" tests/lua/test_bindings.lua 2>"$work/err"; rc=$?
[ $rc = 2 ] && grep -q "cannot read $work/none" "$work/err" || fail "--hostfile unreadable: $rc $(cat "$work/err")"
echo "cli: $fails failed"
[ $fails = 0 ]
