#!/usr/bin/env bash
# End to end through `strata run`: a reduced quickstart learns; a run killed
# after a checkpoint and resumed equals the uninterrupted run bit for bit
# (2 ranks); a checkpoint loads under another rank count; truncated,
# bit-flipped and other-model checkpoints are refused with one line and the
# good checkpoint untouched; metrics files hold what they should.
set -u
BUILD=${BUILD:-build}
S=$(cd "$BUILD/bin" && pwd)/strata
work=$(mktemp -d /tmp/strata-train-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export STRATA_THREADS=1
small=(model.layers=1 model.hidden=32 model.heads=2 model.seq=32 data.tokens=65536
       train.batch=4 train.steps=30 train.eval_every=10 train.eval_batches=2 optim.warmup=5
       checkpoint.every=10 metrics.plot=false)
R=recipes/quickstart.lua

# 1. Uninterrupted, 2 ranks.
"$S" run -n 2 $R "${small[@]}" run_dir="$work/a" >"$work/a.log" 2>&1 || fail "run a: $(tail -3 "$work/a.log")"
"$S" run tests/lua/check_run.lua a="$work/a" rows=30 eval_every=10 >/dev/null || fail "metrics of run a"

# 2. Killed at step 15 (after the step-10 checkpoint), then resumed.
STRATA_FAULT_KILL_AT_STEP=15 "$S" run -n 2 $R "${small[@]}" run_dir="$work/b" >"$work/b.log" 2>&1 \
  && fail "run b was not killed"
[ -f "$work/b/checkpoint.h5" ] || fail "no checkpoint from the killed run"
"$S" run -n 2 $R "${small[@]}" run_dir="$work/b" train.resume=true >"$work/b2.log" 2>&1 \
  || fail "resume: $(tail -3 "$work/b2.log")"
grep -q "resumed from '$work/b/checkpoint.h5' at step 10" "$work/b2.log" || fail "resume line: $(head -3 "$work/b2.log")"
# resuming the finished run again: nothing to train, said so
"$S" run -n 2 $R "${small[@]}" run_dir="$work/b" train.resume=true >"$work/b3.log" 2>&1 || fail "resume of a finished run: $(tail -3 "$work/b3.log")"
grep -q "already at step 30 of 30: nothing to train (raise train.steps to go on)" "$work/b3.log" \
  || fail "resume of a finished run: $(tail -3 "$work/b3.log")"
"$S" run tests/lua/check_run.lua a="$work/a" b="$work/b" rows=30 eval_every=10 >"$work/cmp.log" 2>&1 \
  || fail "resumed run differs: $(cat "$work/cmp.log")"
h5dump -d /model/embed/tokens/weight "$work/a/checkpoint.h5" | sed 1d >"$work/wa" 2>/dev/null
h5dump -d /model/embed/tokens/weight "$work/b/checkpoint.h5" | sed 1d >"$work/wb" 2>/dev/null
cmp -s "$work/wa" "$work/wb" && [ -s "$work/wa" ] || fail "final parameters differ after resume"

# 2b. The same on 1 rank with 2 threads (OpenMP/OpenBLAS reductions must be
#     deterministic too).
STRATA_THREADS=2 "$S" run $R "${small[@]}" run_dir="$work/t1" >"$work/t1.log" 2>&1 || fail "run t1"
(STRATA_THREADS=2 STRATA_FAULT_KILL_AT_STEP=25 "$S" run $R "${small[@]}" run_dir="$work/t2" >"$work/t2.log" 2>&1; exit $?) \
  2>/dev/null && fail "run t2 was not killed"
STRATA_THREADS=2 "$S" run $R "${small[@]}" run_dir="$work/t2" train.resume=true >"$work/t2b.log" 2>&1 \
  || fail "resume t2: $(tail -3 "$work/t2b.log")"
"$S" run tests/lua/check_run.lua a="$work/t1" b="$work/t2" rows=30 eval_every=10 >"$work/cmp2.log" 2>&1 \
  || fail "resumed 2-thread run differs: $(cat "$work/cmp2.log")"

# 3. The checkpoint of 2 ranks continues on 1 rank (layout-independent).
cp "$work/a/checkpoint.h5" "$work/a30.h5"
"$S" run $R "${small[@]}" train.steps=35 run_dir="$work/c" train.resume="$work/a30.h5" >"$work/c.log" 2>&1 \
  || fail "resume on 1 rank: $(tail -3 "$work/c.log")"
grep -q "at step 30" "$work/c.log" || fail "1-rank resume did not start at step 30"

# 4. Bad checkpoints: one line, exit 1, the good checkpoint untouched.
sum=$(md5sum <"$work/a/checkpoint.h5")
size=$(stat -c %s "$work/a30.h5")
head -c $((size / 2)) "$work/a30.h5" >"$work/trunc.h5"
cp "$work/a30.h5" "$work/flip.h5"
# flip bits inside the token embedding's chunk, found by its first 64 bytes
h5dump -d /model/embed/tokens/weight -b LE -o "$work/wte.bin" "$work/a30.h5" >/dev/null 2>&1
off=$("$S" run tests/lua/find_bytes.lua hay="$work/a30.h5" needle="$work/wte.bin" 2>/dev/null || echo -1)
[ "${off:--1}" -ge 0 ] || { fail "cannot locate model/embed/tokens/weight in the file"; off=$((size / 2)); }
printf '\x55' | dd of="$work/flip.h5" bs=1 seek=$((off + 100)) conv=notrunc status=none
expect_refusal() { # name, message, overrides...
  local name=$1 msg=$2; shift 2
  "$S" run $R "${small[@]}" run_dir="$work/a" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ $rc = 1 ] && [ "$(wc -l <"$work/err")" = 1 ] && grep -qF -- "$msg" "$work/err" \
    || fail "$name: exit $rc, stderr: $(cat "$work/err")"
}
expect_refusal truncated "cannot resume: checkpoint '$work/trunc.h5': not a complete HDF5 file" train.resume="$work/trunc.h5"
expect_refusal bit-flip "array 'model/embed/tokens/weight' failed its checksum" train.resume="$work/flip.h5"
expect_refusal other-model "model is 'layers=1 hidden=32 heads=2 seq=32 vocab=256', expected 'layers=1 hidden=64 heads=2 seq=32 vocab=256'" \
  train.resume="$work/a30.h5" model.hidden=64
expect_refusal missing "train.resume: no checkpoint at '$work/none.h5'" train.resume="$work/none.h5"
[ "$(md5sum <"$work/a/checkpoint.h5")" = "$sum" ] || fail "the good checkpoint changed"

# 5. A reduced quickstart learns: from ln 256 = 5.55 to below 2.6 nats/byte.
"$S" run $R train.steps=150 train.eval_every=50 checkpoint.every=0 checkpoint.final=false \
  run_dir="$work/q" >"$work/q.log" 2>&1 || fail "quickstart: $(tail -3 "$work/q.log")"
val=$(sed -n 's/.*validation loss \([0-9.]*\) nats.*/\1/p' "$work/q.log")
grep -q "entropy rate of the source 1.7147 nats/token" "$work/q.log" || fail "entropy rate line: $(tail -4 "$work/q.log")"
awk -v v="$val" 'BEGIN { exit !(v != "" && v < 2.6) }' || fail "quickstart did not learn: val loss '$val'"
[ -s "$work/q/loss.png" ] || fail "no loss.png"
grep -qE "^step 150/150 \| loss [0-9.]+ \| val [0-9.]+ \| lr [0-9.e-]+ \| [0-9.]+k tok/s \| [0-9.]+ GFLOP/s \(MFU [0-9]+%\) \| mem [0-9.]+ MiB/rank \| [0-9]+s, ETA 0s$" "$work/q.log" \
  || fail "progress line: $(grep '^step 150' "$work/q.log")"
grep -qE "sgemm peak [0-9]+ GFLOP/s per rank \((measured now, cached|cached)\)" "$work/q.log" || fail "no sgemm peak: $(head -1 "$work/q.log")"
# 6. The hand-written loop (recipes/manual_loop.lua) computes what strata.experiment
#    computes for the same settings (1 rank), and runs data parallel (2 ranks).
"$S" run recipes/manual_loop.lua train.steps=30 out="$work/manual/m" >"$work/m.log" 2>&1 \
  || fail "manual loop: $(tail -3 "$work/m.log")"
"$S" run $R train.steps=30 optim.warmup=29 checkpoint.final=false checkpoint.every=0 \
  metrics.plot=false run_dir="$work/r" >"$work/r.log" 2>&1 || fail "runner: $(tail -3 "$work/r.log")"
"$S" run tests/lua/same_losses.lua a="$work/manual/m.h5" b="$work/r/metrics.h5" >"$work/s.log" 2>&1 \
  || fail "manual loop and runner differ: $(cat "$work/s.log")"
"$S" run -n 2 recipes/manual_loop.lua train.steps=10 out="$work/manual2/m" >"$work/m2.log" 2>&1 \
  || fail "manual loop on 2 ranks: $(tail -3 "$work/m2.log")"
[ -s "$work/manual2/m-checkpoint.h5" ] || fail "manual loop wrote no checkpoint"
# 7. llm.c shards through recipes/llmc.lua (a tiny model), and a vocabulary
#    too small for the data refused before training.
mkdir -p "$work/shards"
"$S" run tests/lua/make_shards.lua dir="$work/shards" || fail "writing shards"
tiny=(model.layers=1 model.hidden=32 model.heads=2 model.seq=32 model.vocab=1000 train.steps=10
      optim.warmup=2 train.eval_every=5 train.eval_batches=2 metrics.plot=false checkpoint.final=false
      data.path="$work/shards/train_*.bin" data.val_path="$work/shards/val_*.bin" run_dir="$work/l")
"$S" run recipes/llmc.lua "${tiny[@]}" >"$work/l.log" 2>&1 || fail "llmc recipe: $(tail -3 "$work/l.log")"
grep -q "validation loss" "$work/l.log" || fail "llmc recipe did not evaluate"
"$S" run recipes/llmc.lua "${tiny[@]}" model.vocab=500 run_dir="$work/l2" >"$work/l2.log" 2>"$work/l2.err"; rc=$?
[ $rc = 2 ] && grep -q "model.vocab = 500: the data holds token 999 (vocabulary 1000)" "$work/l2.err" \
  || fail "small vocabulary: exit $rc, $(cat "$work/l2.err")"

# 8. ZeRO from the command line: one line per run names the stage, and a
#    model far too large for any machine like this one is refused before
#    anything is allocated or written, with the largest categories.
"$S" run -n 2 $R "${small[@]}" parallel.zero=3 train.steps=8 run_dir="$work/z3" >"$work/z3.log" 2>&1 \
  || fail "ZeRO-3 run: $(tail -3 "$work/z3.log")"
grep -q "adamw, ZeRO-3, 2 ranks" "$work/z3.log" || fail "ZeRO-3 header: $(head -2 "$work/z3.log")"
"$S" run $R model.layers=96 model.hidden=12288 model.heads=96 train.steps=10 optim.warmup=0 run_dir="$work/huge" \
  >"$work/huge.log" 2>"$work/huge.err"; rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$work/huge.err")" = 1 ] \
  && grep -qE "^strata: memory: this model and layout need [0-9.]+ GB per rank \(optimizer state [0-9.]+ GB, gradients [0-9.]+ GB, parameters [0-9.]+ GB\) but a rank has [0-9.]+ GB; a layout that fits: none on 1 rank" "$work/huge.err" \
  || fail "huge model: exit $rc, $(cat "$work/huge.err")"
[ ! -e "$work/huge" ] || fail "huge model: $work/huge was created"
# Pipeline stages from the command line: the header names the layout and the schedule, and the run
# ends with a validation loss
"$S" run -n 2 $R "${small[@]}" model.layers=2 parallel.pp=2 parallel.schedule=gpipe parallel.microbatches=4 \
  train.steps=8 run_dir="$work/pp" >"$work/pp.log" 2>&1 || fail "pp run: $(tail -3 "$work/pp.log")"
grep -q "adamw, tp 1 x pp 2 x dp 1 (gpipe, 4 microbatches), 2 ranks" "$work/pp.log" || fail "pp header: $(head -2 "$work/pp.log")"
grep -q "validation loss [0-9.]* nats/token" "$work/pp.log" || fail "pp validation: $(tail -3 "$work/pp.log")"
# 2D tensor parallelism from the command line on 4 ranks: the header names the mode, and its validation loss
# is the serial run's to its printed 4 decimals (tests/train/tpmd_engine.c compares every step to 1e-6)
"$S" run $R "${small[@]}" train.steps=8 run_dir="$work/tp1" >"$work/tp1.log" 2>&1 || fail "serial run: $(tail -3 "$work/tp1.log")"
"$S" run -n 4 $R "${small[@]}" parallel.tp=4 parallel.tp_mode=2d train.steps=8 run_dir="$work/tp2d" \
  >"$work/tp2d.log" 2>&1 || fail "2d run: $(tail -3 "$work/tp2d.log")"
grep -q "tp 4 (2d) x pp 1 x dp 1" "$work/tp2d.log" || fail "2d header: $(head -2 "$work/tp2d.log")"
v1=$(sed -n 's/.*validation loss \([0-9.]*\) nats.*/\1/p' "$work/tp1.log")
v2=$(sed -n 's/.*validation loss \([0-9.]*\) nats.*/\1/p' "$work/tp2d.log")
awk -v a="$v1" -v b="$v2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 5e-5 * a) }' \
  || fail "2d validation loss $v2, serial $v1"
# Partitioned activation checkpoints from the command line: named in the metrics' layout, and the run trains
"$S" run -n 2 $R "${small[@]}" model.layers=2 model.recompute=true parallel.tp=2 parallel.partition_activations=true \
  train.steps=8 run_dir="$work/pa" >"$work/pa.log" 2>&1 || fail "partitioned run: $(tail -3 "$work/pa.log")"
grep -qa "tp=2 partition_activations pp=1" "$work/pa/metrics.h5" || fail "partitioned run: no such layout attribute"
# ZeRO-Offload's static policy from the command line: the same losses, bit for bit, as without it
"$S" run $R "${small[@]}" train.steps=6 run_dir="$work/off0" >"$work/off0.log" 2>&1 || fail "run without offload: $(tail -3 "$work/off0.log")"
"$S" run $R "${small[@]}" train.steps=6 offload.policy=static run_dir="$work/off1" >"$work/off1.log" 2>&1 \
  || fail "offload run: $(tail -3 "$work/off1.log")"
grep -q "optimizer state offloaded to the host" "$work/off1.log" || fail "offload header: $(head -1 "$work/off1.log")"
"$S" run tests/lua/same_losses.lua a="$work/off0/metrics.h5" b="$work/off1/metrics.h5" >"$work/offs.log" 2>&1 \
  || fail "offload changed the losses: $(tail -2 "$work/offs.log")"
# and ZeRO-Infinity's, the optimizer state on NVMe in a folder of the run's choosing
mkdir -p "$work/nvme"
"$S" run $R "${small[@]}" train.steps=6 offload.policy=nvme offload.nvme_dir="$work/nvme" run_dir="$work/off2" \
  >"$work/off2.log" 2>&1 || fail "NVMe offload run: $(tail -3 "$work/off2.log")"
"$S" run tests/lua/same_losses.lua a="$work/off0/metrics.h5" b="$work/off2/metrics.h5" >"$work/offs2.log" 2>&1 \
  || fail "NVMe offload changed the losses: $(tail -2 "$work/offs2.log")"
[ -z "$(ls -A "$work/nvme")" ] || fail "the NVMe tier left files: $(ls "$work/nvme")"
grep -qE "^step 6/6 .*\| offload host>nvme [0-9.]+ nvme>host [0-9.]+ MB/step" "$work/off2.log" || fail "NVMe offload: no bytes in the progress line: $(grep '^step' "$work/off2.log" | tail -1)"
# and PatrickStar's chunks, on a device of 6 MiB: the same losses, bytes moved both ways in the progress line
"$S" run $R "${small[@]}" train.steps=6 offload.policy=chunks offload.device_mb=6 run_dir="$work/off3" \
  >"$work/off3.log" 2>&1 || fail "chunk offload run: $(tail -3 "$work/off3.log")"
"$S" run tests/lua/same_losses.lua a="$work/off0/metrics.h5" b="$work/off3/metrics.h5" >"$work/offs3.log" 2>&1 \
  || fail "chunk offload changed the losses: $(tail -2 "$work/offs3.log")"
grep -qE "^step 6/6 .*\| offload dev>host [0-9.]+ host>dev [0-9.]+ MB/step" "$work/off3.log" || fail "chunks: no bytes in the progress line: $(grep '^step' "$work/off3.log" | tail -1)"
# PatrickStar's distributed chunks on 2 ranks (ZeRO stage 3: each rank keeps half of them): the losses of
# plain data parallelism
"$S" run -n 2 $R "${small[@]}" train.steps=6 run_dir="$work/off7a" >"$work/off7a.log" 2>&1 || fail "dp run: $(tail -3 "$work/off7a.log")"
"$S" run -n 2 $R "${small[@]}" train.steps=6 parallel.zero=3 offload.policy=chunks offload.device_mb=6 run_dir="$work/off7" \
  >"$work/off7.log" 2>&1 || fail "sharded chunk run: $(tail -3 "$work/off7.log")"
"$S" run tests/lua/same_losses.lua a="$work/off7a/metrics.h5" b="$work/off7/metrics.h5" >"$work/offs7.log" 2>&1 \
  || fail "sharded chunks changed the losses: $(tail -2 "$work/offs7.log")"
# Ring self-attention from the command line: 2 ranks share each sequence; the run's layout says so and
# it ends with a validation loss (tests/train/sp_engine.c checks it against the serial run)
"$S" run -n 2 $R "${small[@]}" train.steps=6 parallel.sp=2 run_dir="$work/sp" >"$work/sp.log" 2>&1 \
  || fail "sp run: $(tail -3 "$work/sp.log")"
grep -qa "pp=1 sp=2 zero=0" "$work/sp/metrics.h5" || fail "sp run: no such layout attribute"
grep -q "validation loss [0-9.]* nats/token" "$work/sp.log" || fail "sp validation: $(tail -3 "$work/sp.log")"
# a device too small is a clear error naming the budget, and a chunk policy without one is refused by the schema
"$S" run $R "${small[@]}" train.steps=6 offload.policy=chunks offload.device_mb=0.25 run_dir="$work/off4" >"$work/off4.log" 2>&1 \
  && fail "a 256 KiB device trained"
grep -q "exceed its limit of 262144 bytes" "$work/off4.log" || fail "256 KiB device: $(tail -2 "$work/off4.log")"
"$S" run $R "${small[@]}" train.steps=6 offload.policy=chunks run_dir="$work/off5" >"$work/off5.log" 2>&1 \
  && fail "chunks without a device budget ran"
grep -q "offload.policy = \"chunks\": needs offload.device_mb" "$work/off5.log" || fail "chunks without device_mb: $(tail -2 "$work/off5.log")"
"$S" run $R "${small[@]}" train.steps=6 offload.chunk_mb=2 run_dir="$work/off6" >"$work/off6.log" 2>&1 \
  && fail "chunk_mb without the chunk policy ran"
grep -q "offload.chunk_mb = 2.*not used with offload.policy = \"none\"" "$work/off6.log" || fail "chunk_mb unread: $(tail -2 "$work/off6.log")"
# recipes/reproduce/offload-max-model.lua on a small device: both policies found, chunks' model the larger
"$S" run recipes/reproduce/offload-max-model.lua device_mb=12 host_mb=40 hidden=128 steps=2 out="$work/omm" \
  >"$work/omm.log" 2>&1 || fail "offload-max-model.lua: $(tail -3 "$work/omm.log")"
awk '/^static +[0-9]+ +[0-9.]+M/ {s = $3 + 0} /^chunks +[0-9]+ +[0-9.]+M/ {c = $3 + 0} END {exit !(s > 0 && c > s)}' \
  "$work/omm.log" || fail "offload-max-model.lua table: $(tail -6 "$work/omm.log")"
# recipes/zero.lua: the four stages, a table against the planner, a plot
"$S" run -n 2 recipes/zero.lua steps=6 out="$work/zr" >"$work/zr.log" 2>&1 || fail "zero.lua: $(tail -3 "$work/zr.log")"
[ "$(grep -cE '^ +[0-3] +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+$' "$work/zr.log")" = 4 ] \
  || fail "zero.lua table: $(tail -8 "$work/zr.log")"
command -v gnuplot >/dev/null && { [ -s "$work/zr/zero.png" ] || fail "zero.lua: no plot"; }
# recipes/layouts.lua: dp 2 with ZeRO 0 and 1, tp 2 and pp 2 (1F1B) on 2 ranks, memory within 10% of the
# planner's (times are figures: the planner fitted on the first run predicts the others)
"$S" run -n 2 recipes/layouts.lua steps=6 out="$work/ly" >"$work/ly.log" 2>&1 || fail "layouts.lua: $(tail -3 "$work/ly.log")"
[ "$(awk '/^ +[12] +[12] +[12] +[01] +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+ +[0-9.]+$/ && $7 > 0.9 && $7 < 1.1' "$work/ly.log" | wc -l)" = 4 ] \
  || fail "layouts.lua table: $(tail -8 "$work/ly.log")"

echo "train: reduced quickstart val loss $val; $fails failed"
[ $fails = 0 ]
