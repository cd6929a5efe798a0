#!/usr/bin/env bash
# Runs that fail loudly and lose nothing, provoked for real through
# `strata run`: a killed rank, a stopped rank, a full disk (a small tmpfs,
# or tests/lua/fullfs.c where none can be mounted) on 1, 2 and 3 ranks,
# SIGINT and SIGTERM (once: stop after the step and save; twice: at once),
# a diverging learning rate, a leftover partial checkpoint, os.exit on one
# rank, a damaged metrics file on resume, a resume with changed settings,
# a stray token that sizes an "auto" vocabulary. Each case checks the message, the exit status, the files left and
# the time the run took to end. The failure table in docs/failures.md
# names the case of this file that proves each row.
set -u
BUILD=${BUILD:-build}
S=$(cd "$BUILD/bin" && pwd)/strata
FULLFS=$(cd "$BUILD/lib" && pwd)/test_fullfs.so
work=$(mktemp -d /tmp/strata-fail-XXXXXX)
mounted=""
cleanup() {
  pkill -KILL -f "$work" 2>/dev/null
  [ -n "$mounted" ] && umount "$mounted" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export STRATA_THREADS=1
R=recipes/quickstart.lua
tiny=(model.layers=1 model.hidden=32 model.heads=2 model.seq=32 data.tokens=65536 train.batch=4
      optim.warmup=5 train.eval_every=0 metrics.plot=false train.log_every=100000)
long=("${tiny[@]}" train.steps=1000000) # runs until stopped

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# within T LIMIT: T (seconds, a float) is at most LIMIT
within() { awk -v t="$1" -v l="$2" 'BEGIN { exit !(t <= l) }'; }
# wait_for FILE SECONDS: until FILE exists
wait_for() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do [ -e "$1" ] && return 0; sleep 0.1; done
  return 1
}
. "$(dirname "$0")/ranks.sh" # worker_of, ckpt_step
# one_line FILE PATTERN: FILE has exactly one line starting "strata:" and it matches PATTERN
one_line() {
  local n; n=$(grep -c '^strata: ' "$1")
  [ "$n" = 1 ] && grep '^strata: ' "$1" | grep -qE -- "$2"
}
# finish PID LIMIT DIR: waits for the run PID (started with &) for LIMIT
# seconds, then kills its ranks (run_dir=DIR); returns its exit status
finish() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$1" 2>/dev/null && { fail "$3: still running after $2 s, killed"; pkill -KILL -f "run_dir=$3"; }
  wait "$1"
}
# started: the run is past its first checkpoint
started() { wait_for "$1/checkpoint.h5" 60; }

# 1. A rank killed by SIGKILL: one line naming the rank, the signal, the step
#    and the last checkpoint, with the command that resumes; exit 137.
d=$work/kill
"$S" run -n 2 $R "${long[@]}" checkpoint.every=200 run_dir="$d" >"$d.out" 2>"$d.err" &
lp=$!
started "$d" || fail "kill: no checkpoint after 60 s: $(tail -2 "$d.err")"
w=$(worker_of 1 "$d")
t0=$(now)
[ -n "$w" ] && kill -KILL "$w" || fail "kill: no worker of rank 1"
finish $lp 60 "$d"; rc=$?; t=$(elapsed "$t0")
[ $rc = 137 ] || fail "kill: exit $rc, not 137"
one_line "$d.err" "rank 1 of 2 was killed by signal 9 \(SIGKILL: .*out-of-memory.*\) at step [0-9]+ of 1000000; last complete checkpoint: $d/checkpoint.h5 \(step [0-9]+\); resume with: .*strata run -n 2 $R .* train.resume=$d/checkpoint.h5$" \
  || fail "kill: message: $(cat "$d.err")"
within "$t" 10 || fail "kill: took $t s to end"
# the resume command it printed works
cmd=$(sed -n 's/.*resume with: //p' "$d.err" | sed 's/train.steps=1000000/train.steps=STEP/')
ck=$(ckpt_step "$d/checkpoint.h5")
cmd=${cmd/train.steps=STEP/train.steps=$((ck + 20))}
eval "$cmd" >"$d.res" 2>&1 || fail "kill: the resume command failed: $cmd: $(tail -2 "$d.res")"
grep -q "resumed from '$d/checkpoint.h5' at step $ck" "$d.res" || fail "kill: resume: $(head -3 "$d.res")"
echo "kill: ended in $t s; resumed at step $ck"

# 1b. A crash (SIGSEGV) of rank 0: the same line, with the cause.
d=$work/segv
"$S" run -n 2 $R "${long[@]}" checkpoint.every=200 run_dir="$d" >"$d.out" 2>"$d.err" &
lp=$!
started "$d" || fail "segv: no checkpoint after 60 s"
kill -SEGV "$(worker_of 0 "$d")"
finish $lp 60 "$d"; rc=$?
[ $rc = 139 ] || fail "segv: exit $rc, not 139"
grep -qE "^strata: rank 0 of 2 was killed by signal 11 \(SIGSEGV: a crash\) at step [0-9]+ of 1000000; last complete checkpoint: $d/checkpoint.h5" "$d.err" \
  || fail "segv: message: $(cat "$d.err")"

# 2. A rank stopped by SIGSTOP: the watchdog (train.collective_timeout,
#    here 0.05 min = 3 s) names the missing rank, the step and the resume
#    command; the run ends within the timeout plus one step.
d=$work/stop
"$S" run -n 2 $R "${long[@]}" checkpoint.every=200 train.collective_timeout=0.05 run_dir="$d" \
  >"$d.out" 2>"$d.err" &
lp=$!
started "$d" || fail "sigstop: no checkpoint after 60 s"
w=$(worker_of 1 "$d")
t0=$(now)
kill -STOP "$w"
finish $lp 60 "$d"; rc=$?; t=$(elapsed "$t0")
kill -KILL "$w" 2>/dev/null
[ $rc != 0 ] || fail "sigstop: exit 0"
# Rank 0 waits either in one of libcomm's collectives (the watchdog asks
# the others where they are) or, when the stop fell just before a
# checkpoint, inside a collective step of parallel HDF5 (its deadline).
hint="last complete checkpoint: $d/checkpoint.h5 \(step [0-9]+\); resume with: .*train.resume="
one_line "$d.err" "watchdog: [a-z_]+ #[0-9]+ on communicator 'dp' \(2 ranks\) did not complete within 3 s on rank 0.*Not arrived.*ranks 1; during step [0-9]+; $hint|checkpoint '$d/checkpoint.h5': [^;]+ did not finish within 3 s: another rank never reached .*; after step [0-9]+; $hint" \
  || fail "sigstop: message: $(cat "$d.err")"
within "$t" 15 || fail "sigstop: took $t s to end (timeout 3 s)"
echo "sigstop: ended in $t s"

# 3. A full disk during a save, with 1, 2 and 3 ranks: a first run saves at
#    step 10; its resume cannot fit a second checkpoint beside the first. One
#    line with the path, the bytes needed and the errno; exit 1; the step-10
#    checkpoint kept; no partial file. A 8 MiB tmpfs when one can be
#    mounted, else fullfs.so with the same budget.
disk=$work/disk
mkdir -p "$disk"
full=()
if mount -t tmpfs -o size=8m tmpfs "$disk" 2>/dev/null; then
  mounted=$disk
  echo "full disk: an 8 MiB tmpfs"
else
  full=(env LD_PRELOAD="$FULLFS" FULLFS_DIR="$disk" FULLFS_BYTES=$((8 << 20)))
  echo "full disk: no tmpfs here (mount refused); fullfs.so with an 8 MiB budget"
fi
mid=(model.layers=2 model.hidden=128 model.heads=4 model.seq=64 data.tokens=65536 train.batch=2
     optim.warmup=2 train.eval_every=0 metrics.plot=false checkpoint.every=10)
for np in 1 2 3; do
  d=$disk/r$np
  "${full[@]}" "$S" run -n $np $R "${mid[@]}" train.steps=10 run_dir="$d" >"$work/full$np.out" 2>&1 \
    || fail "full disk np=$np: the first run failed: $(tail -2 "$work/full$np.out")"
  sum=$(md5sum <"$d/checkpoint.h5")
  t0=$(now)
  "${full[@]}" "$S" run -n $np $R "${mid[@]}" train.steps=20 train.resume=true run_dir="$d" \
    >"$work/full$np.out" 2>"$work/full$np.err"
  rc=$?; t=$(elapsed "$t0")
  [ $rc = 1 ] || fail "full disk np=$np: exit $rc: $(cat "$work/full$np.err")"
  grep -q "^strata: resuming with settings other than the checkpoint's: train.steps 10 -> 20$" "$work/full$np.err" \
    || fail "full disk np=$np: no note of the raised train.steps: $(cat "$work/full$np.err")"
  sed -i '/^strata: resuming with settings other than/d' "$work/full$np.err" # (the one line that matters)
  one_line "$work/full$np.err" "checkpoint '$d/checkpoint.h5': needs [0-9.]+ MB \([0-9]+ bytes\) on its file system, which has .* free: No space left on device \(errno 28\); in the checkpoint after step 20; last complete checkpoint: $d/checkpoint.h5 \(step 10\); resume with: " \
    || fail "full disk np=$np: message: $(cat "$work/full$np.err")"
  [ "$(md5sum <"$d/checkpoint.h5")" = "$sum" ] || fail "full disk np=$np: the step-10 checkpoint changed"
  [ "$(ckpt_step "$d/checkpoint.h5")" = 10 ] || fail "full disk np=$np: checkpoint not at step 10"
  [ ! -e "$d/checkpoint.h5.tmp" ] || fail "full disk np=$np: the partial checkpoint was left"
  within "$t" 30 || fail "full disk np=$np: took $t s"
  rm -rf "$d"
  echo "full disk np=$np: ended in $t s"
done
# checkpoint.on_error = "continue": the failure is reported, training goes on.
d=$disk/cont
"${full[@]}" "$S" run -n 2 $R "${mid[@]}" train.steps=10 run_dir="$d" >/dev/null 2>&1
"${full[@]}" "$S" run -n 2 $R "${mid[@]}" train.steps=30 train.resume=true checkpoint.on_error=continue \
  run_dir="$d" >"$work/cont.out" 2>"$work/cont.err"
rc=$?
[ $rc = 0 ] || fail "on_error=continue: exit $rc: $(cat "$work/cont.err")"
[ "$(grep -c 'failed, training goes on: .*No space left on device' "$work/cont.err")" = 2 ] \
  || fail "on_error=continue: notices: $(cat "$work/cont.err")"
grep -q "30 steps\|20 steps in" "$work/cont.out" || fail "on_error=continue: did not finish: $(tail -3 "$work/cont.out")"
[ "$(ckpt_step "$d/checkpoint.h5")" = 10 ] && [ ! -e "$d/checkpoint.h5.tmp" ] \
  || fail "on_error=continue: files: $(ls "$d")"
rm -rf "$d"
# A write that fails inside HDF5's collective writes, after the space was
# (falsely) reserved: the run ends within the collective timeout (0.05 min)
# instead of hanging, and nothing is left.
d=$disk/inflight
if [ -n "$mounted" ]; then # the real disk, 4 MiB of it taken: HDF5's own writes fail
  head -c $((4 << 20)) /dev/zero >"$disk/ballast"
  lie=(env LD_PRELOAD="$FULLFS" FULLFS_DIR="$d" FULLFS_BYTES=$((1 << 40)) FULLFS_FALLOCATE=lie)
else
  lie=(env LD_PRELOAD="$FULLFS" FULLFS_DIR="$d" FULLFS_BYTES=$((3 << 20)) FULLFS_FALLOCATE=lie)
fi
t0=$(now)
"${lie[@]}" "$S" run -n 2 $R "${mid[@]}" train.steps=10 train.collective_timeout=0.05 run_dir="$d" \
  >"$work/inflight.out" 2>"$work/inflight.err"
rc=$?; t=$(elapsed "$t0")
rm -f "$disk/ballast"
[ $rc = 1 ] || fail "in-flight write failure: exit $rc: $(cat "$work/inflight.err")"
# (Where HDF5's collective steps line up, every rank reports the failed write
# at once; where one rank is left inside a collective step, the others give
# up after the timeout. Either way the run ends, names the file and the
# failure, and leaves nothing.)
grep -qE "^strata: (\[rank [0-9]\] )?checkpoint '$d/checkpoint.h5': .*(file write failed|one of them is stuck).*; in the checkpoint after step 10; no checkpoint was written" "$work/inflight.err" \
  || fail "in-flight write failure: message: $(cat "$work/inflight.err")"
[ ! -e "$d/checkpoint.h5.tmp" ] && [ ! -e "$d/checkpoint.h5" ] || fail "in-flight: files left: $(ls "$d")"
within "$t" 20 || fail "in-flight write failure: took $t s"
echo "in-flight write failure: ended in $t s"

# A full disk under the metrics file (rank 0 alone writes it): every rank
# ends at the next step with rank 0's message, exit 1 (not a crash in
# HDF5's close at exit), the rows written so far kept and readable. (The
# rows reach the file at each checkpoint, 1000 at a time: a 900 kB disk
# takes the first append, about 360 kB written and 600 kB held ahead, and
# refuses the second, which holds 256 kB + 4 x its 80 kB of rows beyond
# the file's end.)
d=$work/metrics
mkdir -p "$d/m"
env LD_PRELOAD="$FULLFS" FULLFS_DIR="$d/m" FULLFS_BYTES=900000 \
  "$S" run -n 2 $R "${tiny[@]}" train.steps=20000 checkpoint.every=1000 metrics.path="$d/m/metrics.h5" \
  run_dir="$d" >"$d.out" 2>"$d.err"
rc=$?
[ $rc = 1 ] || fail "metrics full: exit $rc: $(tail -3 "$d.err")"
one_line "$d.err" "\[rank 0\] metrics '$d/m/metrics.h5': needs [0-9.]+ [kM]B \([0-9]+ bytes\) on its file system, which has .* free: No space left on device \(errno 28\); the rows written so far are kept; during step [0-9]+; last complete checkpoint: $d/checkpoint.h5 \(step [0-9]+\); resume with: " \
  || fail "metrics full: message: $(cat "$d.err")"
rows=$(h5dump -d /step "$d/m/metrics.h5" 2>/dev/null | sed -n 's/.*DATASPACE *SIMPLE { ( \([0-9]*\) ).*/\1/p')
[ "${rows:-0}" -gt 0 ] && ! h5dump -d /loss "$d/m/metrics.h5" | grep -q nan || fail "metrics full: rows kept: '$rows'"
echo "metrics full: $rows rows kept"

# 4. SIGINT to `strata run -n 2` (Ctrl-C), SIGTERM to every process of a
#    1-rank run (what a scheduler sends): the step finishes, a checkpoint is
#    saved at it, one line says so with the resume command; exit 3. With
#    checkpoint.every = 0, nothing else would have saved.
d=$work/int
"$S" run -n 2 $R "${long[@]}" checkpoint.every=0 run_dir="$d" >"$d.out" 2>"$d.err" &
lp=$!
wait_for "$d/metrics.h5" 30 && sleep 1
t0=$(now)
kill -INT $lp
finish $lp 60 "$d"; rc=$?; t=$(elapsed "$t0")
[ $rc = 3 ] || fail "sigint: exit $rc: $(cat "$d.err")"
step=$(sed -n 's/^strata: stopped on request after step \([0-9]*\) of.*/\1/p' "$d.err")
grep -q "^strata: stopping after this step and saving a checkpoint (interrupt again to stop at once)" "$d.err" \
  || fail "sigint: no notice: $(cat "$d.err")"
grep -qE "^strata: stopped on request after step $step of 1000000; last complete checkpoint: $d/checkpoint.h5 \(step $step\); resume with: " "$d.err" \
  || fail "sigint: message: $(cat "$d.err")"
[ -n "$step" ] && [ "$(ckpt_step "$d/checkpoint.h5")" = "$step" ] || fail "sigint: checkpoint at '$(ckpt_step "$d/checkpoint.h5")', not '$step'"
within "$t" 10 || fail "sigint: took $t s"
echo "sigint: stopped at step $step in $t s"
d=$work/term
"$S" run $R "${long[@]}" checkpoint.every=0 run_dir="$d" >"$d.out" 2>"$d.err" &
lp=$!
wait_for "$d/metrics.h5" 30 && sleep 1
t0=$(now)
kill -TERM -- $(pgrep -f "run_dir=$d") # the guard and the worker, as a scheduler does
finish $lp 60 "$d"; rc=$?; t=$(elapsed "$t0")
step=$(sed -n 's/^strata: stopped on request after step \([0-9]*\) of.*/\1/p' "$d.err")
[ $rc = 3 ] && [ -n "$step" ] && [ "$(ckpt_step "$d/checkpoint.h5")" = "$step" ] \
  || fail "sigterm: exit $rc, step '$step': $(cat "$d.err")"
within "$t" 10 || fail "sigterm: took $t s"
echo "sigterm: stopped at step $step in $t s"
# A second interrupt stops at once: exit 130, no checkpoint for that step.
d=$work/int2
"$S" run -n 2 $R "${long[@]}" model.hidden=512 model.heads=4 train.batch=16 checkpoint.every=0 \
  run_dir="$d" >"$d.out" 2>"$d.err" &
lp=$!
wait_for "$d/metrics.h5" 30 && sleep 1
t0=$(now)
kill -INT $lp; sleep 0.1; kill -INT $lp
finish $lp 60 "$d"; rc=$?; t=$(elapsed "$t0")
[ $rc = 130 ] || fail "second sigint: exit $rc: $(cat "$d.err")"
grep -q "^strata: stopping at once; this step is not saved" "$d.err" || fail "second sigint: $(cat "$d.err")"
[ ! -e "$d/checkpoint.h5" ] || fail "second sigint: a checkpoint was written"
within "$t" 10 || fail "second sigint: took $t s"
pgrep -f "run_dir=$d" >/dev/null && fail "second sigint: processes left"
echo "second sigint: ended in $t s"

# 5. A diverging learning rate: exit 1 at the step where the loss ran away,
#    the likely cause named, no checkpoint written.
d=$work/div
"$S" run $R "${tiny[@]}" train.steps=50 optim.lr=100 checkpoint.every=10 run_dir="$d" >"$d.out" 2>"$d.err"
rc=$?
[ $rc = 1 ] || fail "divergence: exit $rc"
one_line "$d.err" "the loss diverged at step [0-9]+: .* more than 4 times the first step's 5\.[0-9]+, at learning rate [0-9.e+]+: lower optim.lr \(100\) or lengthen optim.warmup \(5\); the limit is train.diverge_factor = 4" \
  || fail "divergence: message: $(cat "$d.err")"
[ ! -e "$d/checkpoint.h5" ] || fail "divergence: a checkpoint of the diverged model"
# not finite: the check stays with diverge_factor = 0 (over the diverged run's metrics)
"$S" run $R "${tiny[@]}" train.steps=50 optim.name=sgd optim.lr=100 optim.clip=0 train.diverge_factor=0 run_dir="$d" \
  overwrite=true >"$d.out" 2>"$d.err"
rc=$?
[ $rc = 1 ] && grep -q "the loss diverged at step [0-9]*: loss NaN, gradient norm NaN (not finite; the update was not applied)" "$d.err" \
  || fail "divergence to inf: exit $rc: $(cat "$d.err")"

# 6. A leftover partial checkpoint (a kill during a save) is removed by the
#    next run, which says so.
d=$work/left
mkdir -p "$d"
echo "partial" >"$d/checkpoint.h5.tmp"
"$S" run $R "${tiny[@]}" train.steps=6 run_dir="$d" >"$d.out" 2>"$d.err" || fail "leftover: $(cat "$d.err")"
grep -q "^strata: removed '$d/checkpoint.h5.tmp', left by a checkpoint save that did not finish" "$d.err" \
  || fail "leftover: message: $(cat "$d.err")"
[ ! -e "$d/checkpoint.h5.tmp" ] && [ -e "$d/checkpoint.h5" ] || fail "leftover: files: $(ls "$d")"

# 7. os.exit on one rank: its guard names the rank and the status.
cat >"$work/exit.lua" <<'EOF'
local strata = require "strata"
local rank = strata.world()
if rank == 1 then os.exit(7) end
strata.barrier()
EOF
t0=$(now)
"$S" run -n 2 "$work/exit.lua" >"$work/exit.out" 2>"$work/exit.err"
rc=$?; t=$(elapsed "$t0")
[ $rc = 7 ] || fail "os.exit: exit $rc"
one_line "$work/exit.err" "rank 1 of 2 exited with status 7 without an error message \(os.exit in the recipe\?\) before training started; no checkpoint was written; start again with: .*strata run -n 2 $work/exit.lua$" \
  || fail "os.exit: message: $(cat "$work/exit.err")"
within "$t" 10 || fail "os.exit: took $t s"

# 8. A constant schedule with min_lr = lr is a constant rate (the schedule's
#    end factor is 1 exactly), through the recipe and strata.optimizer.
"$S" run $R "${tiny[@]}" train.steps=6 optim.schedule=constant optim.lr=0.01 optim.min_lr=0.01 \
  run_dir="$work/const" >"$work/const.out" 2>&1 || fail "constant schedule: $(tail -2 "$work/const.out")"
cat >"$work/const.lua" <<'EOF'
local strata = require "strata"
local m <close> = assert(strata.gpt{layers = 1, hidden = 16, heads = 2, seq = 8, vocab = 32})
local lr = 0.01
assert(strata.optimizer{model = m, schedule = "constant", lr = lr, min_lr = lr})
local o, err = strata.optimizer{model = m, lr = lr, min_lr = 0.02}
assert(not o and err:find("optim.min_lr = 0.02 must lie in %[0, optim.lr = 0.01%]"), err)
EOF
"$S" run "$work/const.lua" >"$work/const.out" 2>&1 || fail "strata.optimizer min_lr = lr: $(cat "$work/const.out")"

# 9. A damaged metrics file on resume is kept aside, said so, and a new one
#    continues from the checkpoint's step; the run goes on.
d="$work/metr"
"$S" run $R "${tiny[@]}" train.steps=6 run_dir="$d" >/dev/null 2>&1 || fail "metrics: first run"
head -c 3000 /dev/urandom >"$d/metrics.h5"
cp "$d/metrics.h5" "$work/garbage"
"$S" run $R "${tiny[@]}" train.steps=9 train.resume=true run_dir="$d" >"$d.out" 2>"$d.err" \
  || fail "metrics: resume over a damaged file: $(cat "$d.err")"
grep -qE "^strata: metrics '$d/metrics.h5': not a readable HDF5 file.*: cannot be continued; kept as '$d/metrics.h5.unreadable', a new metrics file starts at step 7$" "$d.err" \
  || fail "metrics: notice: $(cat "$d.err")"
cmp -s "$work/garbage" "$d/metrics.h5.unreadable" || fail "metrics: the damaged file was not kept as it was"
cat >"$work/steps.lua" <<'EOF'
local strata = require "strata"
local s = assert(strata.metrics.read(strata.option("f", "") .. "/metrics.h5", "step"))
assert(#s == 3 and s[1] == 7 and s[3] == 9, "steps " .. table.concat(s, ","))
EOF
"$S" run "$work/steps.lua" f="$d" >/dev/null 2>"$d.chk" || fail "metrics: the new file: $(cat "$d.chk")"

# 10. A resume with another learning rate or data seed says so (one line
#     naming each changed setting, old -> new) and trains on; the same
#     settings say nothing (tests/lua/runs.sh has more).
"$S" run $R "${tiny[@]}" train.steps=9 train.resume=true run_dir="$d" >"$d.same" 2>&1 \
  || fail "resume: same settings: $(tail -2 "$d.same")"
grep -q "other than the checkpoint" "$d.same" && fail "resume: same settings noticed: $(cat "$d.same")"
"$S" run $R "${tiny[@]}" train.steps=15 train.resume=true optim.lr=0.002 data.seed=7 run_dir="$d" \
  >/dev/null 2>"$d.err" || fail "resume: changed settings: $(cat "$d.err")"
grep -qE "^strata: resuming with settings other than the checkpoint's: data.seed 1 -> 7, optim.lr 0.01 -> 0.002, train.steps 9 -> 15$" "$d.err" \
  && [ "$(wc -l <"$d.err")" = 1 ] || fail "resume: changed settings: $(cat "$d.err")"

# 11. A stray token id far above all others raises an "auto" vocabulary: a
#     warning says which token and how often; the run goes on.
cat >"$work/stray.lua" <<'EOF'
local strata = require "strata"
local f = assert(io.open(strata.option("out", ""), "wb"))
for i = 0, 20000 do f:write(string.pack("<I2", i == 777 and 60000 or (i * 7) % 200)) end
f:close()
EOF
"$S" run "$work/stray.lua" out="$work/stray.u16" >/dev/null 2>&1 || fail "stray: writing the file"
notokens=()
for a in "${tiny[@]}"; do [ "${a%%=*}" = data.tokens ] || notokens+=("$a"); done
"$S" run $R "${notokens[@]}" data.source=uint16 data.path="$work/stray.u16" train.steps=6 run_dir="$work/stray" \
  >/dev/null 2>"$work/stray.err" || fail "stray: the run: $(cat "$work/stray.err")"
grep -qE "^strata: model.vocab = auto: the vocabulary is 60001 because token 60000 occurs 1 time in 20001 tokens, while every other token is at most 199; set model.vocab to size the model yourself$" "$work/stray.err" \
  || fail "stray: warning: $(cat "$work/stray.err")"

echo "failures: $fails failed"
[ $fails = 0 ]
