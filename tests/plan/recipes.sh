#!/usr/bin/env bash
# `strata plan`: every reproduction recipe runs, ZeRO's Table 1 comes out
# exact, an experiment recipe is planned instead of trained, and bad planner
# input stops with a message naming it.
set -u
BUILD=${BUILD:-build}
s="$BUILD/bin/strata"
fail=0
no() { echo "FAIL: $*"; fail=1; }
for f in recipes/reproduce/*.lua; do
  out=$("$s" plan "$f" 2>&1) || no "$f exited $?: $(tail -3 <<<"$out")"
  grep -q "largest relative error" <<<"$out" || no "$f printed no summary"
done
"$s" plan recipes/reproduce/zero-table1.lua | grep -q "zero-table1: largest relative error 0.0%" ||
  no "ZeRO Table 1 is not exact"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cp recipes/quickstart.lua "$work/q.lua"
out=$(cd "$work" && "$OLDPWD/$s" plan q.lua 2>&1) || no "plan of the quickstart exited $?: $out"
grep -q "memory per device" <<<"$out" && grep -q "tokens/s" <<<"$out" || no "no plan printed: $out"
[ -e "$work/runs" ] && no "plan mode trained (runs/ was written)"
cat >"$work/bad1.lua" <<'R'
require("strata").reproduce("zero-table9")
R
out=$("$s" plan "$work/bad1.lua" 2>&1) && no "unknown reproduction accepted"
grep -q "no published result 'zero-table9' (known: zero-table1" <<<"$out" || no "message: $out"
cat >"$work/bad2.lua" <<'R'
require("strata").plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
  cluster = {base = "dgx-a100-80gb", gpu_count = 3}}
R
out=$("$s" plan "$work/bad2.lua" 2>&1) && no "unknown cluster key accepted"
grep -q "bad2.lua:1: plan: unknown cluster key 'gpu_count'" <<<"$out" || no "message: $out"
cat >"$work/bad3.lua" <<'R'
require("strata").plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
  parallel = {tp_mode = "4d"}, cluster = "dgx-a100-80gb"}
R
out=$("$s" plan "$work/bad3.lua" 2>&1) && no "tp_mode 4d accepted"
grep -q "tp_mode = 4d: expected one of 1d, 2d, 2.5d, 3d" <<<"$out" || no "message: $out"
# a cluster given as its Lua file plans exactly like the C preset of the same name
for f in recipes/clusters/*.lua; do
  name=$(basename "$f" .lua)
  cat >"$work/cl.lua" <<R
local s = require "strata"
local m = {layers = 4, hidden = 256, heads = 8, seq = 128, vocab = 256}
local a = s.plan{model = m, cluster = dofile("$f"), print = false}
local b = s.plan{model = m, cluster = "$name", print = false}
assert(a.time.step == b.time.step and a.mem.total == b.mem.total, "$name: Lua file and preset differ")
R
  out=$("$s" plan "$work/cl.lua" 2>&1) || no "cluster file $f: $out"
done
# strata.plan_calibrate: a given rate sets the cluster's gemm_efficiency; a
# measured one (libtensor's sgemm on this CPU) too, and the table plans.
# strata.plan_largest: the largest model of a family that fits, one more does not.
cat >"$work/cal.lua" <<'R'
local s = require "strata"
local c, r = s.plan_calibrate{cluster = "dgx1-v100-32gb", tflops = 62.5, precision = "fp16"}
assert(c["gemm_efficiency.fp16"] == 0.5 and r.fp16 == 62.5, "given rate")
local m, rates = s.plan_calibrate{cluster = "this-machine", measure = true, size = 512}
assert(rates.fp32 > 0 and rates.bf16 == rates.fp32, "measured rate")
assert(m["gemm_efficiency.fp32"] > 0 and m["gemm_efficiency.fp32"] <= 1, "measured efficiency")
local p = s.plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256}, cluster = m, print = false}
assert(p.time.compute > 0)
local model = {layers = 1, hidden = 2048, heads = 16, seq = 1024, vocab = 50304, recompute = true}
local big = s.plan_largest{model = model, cluster = {base = "dgx1-v100-32gb", gpus_per_node = 1},
  parallel = {precision = "fp16", microbatch = 4}, print = false}
assert(big.fits and big.model.hidden == 2048 and big.model.layers > 1 and big.next:find("needs"), big.next)
model.layers = big.model.layers + 1
assert(not s.plan{model = model, cluster = {base = "dgx1-v100-32gb", gpus_per_node = 1},
  parallel = {precision = "fp16", microbatch = 4}, print = false}.fits, "one layer more fits")
print("calibrate and largest: ok " .. big.model.layers)
R
out=$("$s" plan "$work/cal.lua" 2>&1) || no "plan_calibrate / plan_largest: $out"
grep -q "calibrate and largest: ok" <<<"$out" || no "plan_calibrate / plan_largest printed: $out"
cat >"$work/cal2.lua" <<'R'
require("strata").plan_calibrate{cluster = "dgx-a100-80gb", tflops = 250}
R
out=$("$s" plan "$work/cal2.lua" 2>&1) && no "a rate without its precision accepted"
grep -q "cal2.lua:1: plan_calibrate: tflops needs precision" <<<"$out" || no "message: $out"
[ $fail = 0 ] && echo "strata plan: ok"
exit $fail
