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
grep -q "bad3.lua:1: plan: parallel.tp_mode = \"4d\": expected one of 1d, 2d, 2.5d, 3d" <<<"$out" || no "message: $out"
# strata plan applies key=value settings to the recipe's experiment, checked as under strata run
out=$(cd "$work" && "$OLDPWD/$s" plan q.lua model.layers=4 train.batch=2 2>&1) || no "plan with settings exited $?: $out"
grep -q "GPT 4 layers" <<<"$out" && grep -q "microbatch 2, global batch 2," <<<"$out" || no "settings not applied: $out"
# plan.cluster: parallel.dp = "auto" spreads over its devices; the precision is the run's (fp32 unless set),
# printed, with a note where the GPU has a faster one
cat >"$work/cl2.lua" <<'R'
local strata = require "strata"
strata.experiment{
  model = {layers = 24, hidden = 2048, heads = 16, seq = 1024, vocab = 51200},
  parallel = {tp = 2},
  train = {batch = 4, accum = 2},
  plan = {cluster = {base = "dgx-a100-80gb", nodes = 2}},
}
R
out=$("$s" plan "$work/cl2.lua" 2>&1) || no "plan on plan.cluster exited $?: $out"
grep -q "layout   dp 8 x tp 2 (1d) x pp 1 x sp 1, ZeRO 0, microbatch 4, global batch 64," <<<"$out" &&
  grep -q "^precision fp32: " <<<"$out" && grep -q "^cluster  dgx-a100-80gb: 2 nodes x 8 GPUs" <<<"$out" &&
  grep -q '^note: parallel.precision is not set, so this plan is in fp32, as strata run trains; parallel.precision = "bf16"' <<<"$out" ||
  no "plan of an experiment on plan.cluster: $out"
out=$("$s" plan "$work/cl2.lua" parallel.precision=bf16 plan.cluster=dgx-h100 2>&1) || no "exited $?: $out"
grep -q "^precision bf16 mixed: " <<<"$out" && grep -q "^cluster  dgx-h100: 1 node x 8 GPUs" <<<"$out" &&
  ! grep -q "^note:" <<<"$out" || no "plan with parallel.precision=bf16 plan.cluster=dgx-h100: $out"
# parallel.activations = "bf16" (a GPU run's 16-bit activations) plans 2 bytes an element: the
# activation memory of the fp32 plan shrinks (the log-sum-exp and masks stay), with a note
act_gb() { sed -n 's/^  activations  *\([0-9.]*\).*/\1/p' <<<"$1"; }
out=$("$s" plan "$work/cl2.lua" parallel.tp=1 parallel.device=cuda 2>&1) || no "exited $?: $out"
a32=$(act_gb "$out")
out=$("$s" plan "$work/cl2.lua" parallel.tp=1 parallel.device=cuda parallel.activations=bf16 2>&1) || no "exited $?: $out"
a16=$(act_gb "$out")
grep -q '^note: parallel.activations = "bf16": activations planned in 16 bits' <<<"$out" &&
  awk -v a="$a32" -v b="$a16" 'BEGIN { exit !(a > 0 && b >= 0.5 * a && b < 0.6 * a) }' ||
  no "plan with bf16 activations: fp32 $a32 GB, bf16 $a16 GB: $out"
# One default precision: strata.plan and strata.plan_search without one plan the cluster's mixed
# precision (bf16 on A100, fp16 on V100, which lacks bf16); the search's options fix or list
# precision, schedule and interleave; its rejections come grouped by cause, every cause printed.
cat >"$work/prec.lua" <<'R'
local s = require "strata"
local m = {layers = 24, hidden = 1024, heads = 16, seq = 1024, vocab = 51200}
assert(s.plan{model = m, cluster = "dgx-a100-80gb", print = false}.parallel.precision == "bf16")
assert(s.plan{model = m, cluster = "dgx1-v100-32gb", print = false}.parallel.precision == "fp16")
for _, e in ipairs(s.plan_search{model = m, cluster = "dgx1-v100-32gb", global_batch = 64, top = 50, print = false}) do
  assert(e.parallel.precision == "fp16", e.layout)
end
local r = s.plan_search{model = m, cluster = {base = "dgx-a100-40gb", nodes = 2}, global_batch = 64, top = 100000,
                        precision = {"fp32", "bf16"}, schedule = {"1f1b", "interleaved"}, interleave = {2, 3},
                        print = false}
local seen, rejected = {}, 0
for _, e in ipairs(r) do
  local p = e.parallel
  seen[p.precision] = true
  if p.pp > 1 then
    seen[p.schedule .. p.interleave] = true
    assert(p.schedule == "1f1b" and p.interleave == 1 or p.schedule == "interleaved" and (p.interleave == 2 or p.interleave == 3))
  end
  if not e.fits then rejected = rejected + 1 end
end
assert(seen.fp32 and seen.bf16 and not seen.fp16 and seen["1f1b1"] and seen.interleaved2 and seen.interleaved3)
assert(r[1].fits and r[1].parallel.precision == "bf16", "bf16 is the fastest on A100")
local sum = 0
for _, c in ipairs(r.rejected) do
  sum = sum + c.count
  assert(c.cause:find("#", 1, true) and type(c.why) == "string" and c.parallel.dp >= 1)
end
assert(sum == rejected, "causes count every rejected layout")
print("causes " .. #r.rejected)
s.plan_search{model = m, cluster = {base = "dgx-a100-40gb", nodes = 2}, global_batch = 64, top = 1,
              precision = {"fp32", "bf16"}, schedule = {"1f1b", "interleaved"}, interleave = {2, 3}}
R
out=$("$s" plan "$work/prec.lua" 2>&1) || no "default precision and search options: $out"
causes=$(sed -n 's/^causes //p' <<<"$out")
[ -n "$causes" ] && [ "$causes" -gt 1 ] && grep -q " rejected for $causes causes:" <<<"$out" &&
  [ "$(grep -c '^           #[0-9]*: dp ' <<<"$out")" = "$causes" ] || no "search causes ($causes): $out"
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
