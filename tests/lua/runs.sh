#!/usr/bin/env bash
# A run's folder and settings, as a newcomer meets them:
#   1. A second run into the same run_dir is refused before anything is read
#      or written: exit 2, one line naming the folder, what it holds and the
#      ways on. overwrite=true starts again (the earlier checkpoint removed
#      first); train.resume=true continues; both at once contradict. `make
#      run`'s command works twice in a row.
#   2. A resume with changed settings says which, old -> new, in one line
#      (and trains on); the same settings say nothing.
#   3. Relative data paths in a recipe are relative to the recipe's folder,
#      wherever strata runs from; on the command line, to the current folder.
#   4. An error that a command-line setting brings about names that setting
#      ("command line: train.steps=10: ..."), not the recipe's line alone.
set -u
BUILD=${BUILD:-build}
S=$(cd "$BUILD/bin" && pwd)/strata
repo=$(pwd)
work=$(mktemp -d /tmp/strata-runs-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export STRATA_THREADS=1
R=recipes/quickstart.lua
small=(model.layers=1 model.hidden=32 model.heads=2 model.seq=32 data.tokens=65536 train.batch=4
       train.steps=8 train.eval_every=4 train.eval_batches=2 optim.warmup=2 checkpoint.every=4 metrics.plot=false)
# one_error FILE PATTERN: FILE is one line, "strata: " and PATTERN (a fixed string)
one_error() { [ "$(wc -l <"$1")" = 1 ] && grep -qF -- "strata: $2" "$1"; }

# 1. A second run into the same folder.
d=$work/a
"$S" run $R "${small[@]}" run_dir="$d" >"$work/a1.out" 2>&1 || fail "first run: $(tail -3 "$work/a1.out")"
sum=$(md5sum <"$d/checkpoint.h5")
"$S" run $R "${small[@]}" run_dir="$d" >"$work/a2.out" 2>"$work/a2.err"; rc=$?
[ $rc = 2 ] && one_error "$work/a2.err" "$d holds an earlier run: checkpoint.h5 (step 8), metrics.h5 (to step 8); resume it with train.resume=true, or start again over it with overwrite=true (or choose another run_dir)" \
  || fail "second run: exit $rc: $(cat "$work/a2.err")"
[ ! -s "$work/a2.out" ] || fail "second run printed: $(cat "$work/a2.out")"
[ "$(md5sum <"$d/checkpoint.h5")" = "$sum" ] && [ "$(ls "$d")" = "$(printf 'checkpoint.h5\nmetrics.h5')" ] \
  || fail "the refused run touched $d: $(ls "$d")"
# ... the same on 2 ranks: one line, once
"$S" run -n 2 $R "${small[@]}" run_dir="$d" >/dev/null 2>"$work/a3.err"; rc=$?
[ $rc = 2 ] && one_error "$work/a3.err" "$d holds an earlier run: " || fail "second run on 2 ranks: exit $rc: $(cat "$work/a3.err")"
# ... a folder with metrics and no checkpoint offers no resume
mkdir -p "$work/m" && cp "$d/metrics.h5" "$work/m/"
"$S" run $R "${small[@]}" run_dir="$work/m" >/dev/null 2>"$work/m.err"; rc=$?
[ $rc = 2 ] && one_error "$work/m.err" "$work/m holds an earlier run: metrics.h5 (to step 8); start again over it with overwrite=true (or choose another run_dir)" \
  || fail "metrics only: exit $rc: $(cat "$work/m.err")"
# overwrite=true starts again: a run killed before its first checkpoint leaves none of the earlier run's
STRATA_FAULT_KILL_AT_STEP=2 "$S" run $R "${small[@]}" run_dir="$d" overwrite=true >"$work/o.out" 2>"$work/o.err" \
  && fail "the overwriting run was not killed"
[ ! -e "$d/checkpoint.h5" ] || fail "overwrite=true left the earlier checkpoint"
# ... and the command it gives to start again starts again over its metrics
grep -q "no checkpoint was written; start again with: .* run_dir=$d overwrite=true$" "$work/o.err" \
  || fail "killed overwrite: $(cat "$work/o.err")"
again=$(sed -n 's/.*; start again with: //p' "$work/o.err")
eval "$again" >"$work/o2.out" 2>&1 || fail "overwrite: $again: $(tail -3 "$work/o2.out")"
grep -q "strata: quickstart: 8 steps in" "$work/o2.out" || fail "overwrite did not train from step 0: $(tail -3 "$work/o2.out")"
# train.resume=true continues in place; overwrite with it is a contradiction
"$S" run $R "${small[@]}" train.steps=10 run_dir="$d" train.resume=true >"$work/r.out" 2>"$work/r.err" \
  || fail "resume: $(cat "$work/r.err")"
grep -q "resumed from '$d/checkpoint.h5' at step 8" "$work/r.out" || fail "resume line: $(cat "$work/r.out")"
"$S" run $R "${small[@]}" run_dir="$d" train.resume=true overwrite=true >/dev/null 2>"$work/ro.err"; rc=$?
[ $rc = 2 ] && one_error "$work/ro.err" "command line: overwrite = true: not used when resuming" || fail "resume and overwrite: exit $rc: $(cat "$work/ro.err")"
# `make run`'s command, twice in a row (here small, in a folder of this test)
run=$(sed -n 's/^RUN_COMMAND := //p' lua/lua.mk | sed "s|\$(BUILD)|$BUILD|")
case "$run" in *overwrite=true*) ;; *) fail "make run's command does not overwrite: $run" ;; esac
for i in 1 2; do
  # shellcheck disable=SC2086
  $run "${small[@]}" run_dir="$work/make-run" >"$work/mr$i.out" 2>&1 || fail "make run's command, time $i: $(tail -3 "$work/mr$i.out")"
done

# 2. A resume with changed settings says so, old -> new; the same settings say nothing.
"$S" run $R "${small[@]}" train.steps=10 run_dir="$d" train.resume=true >"$work/s.out" 2>"$work/s.err" \
  || fail "resume of a finished run: $(cat "$work/s.err")"
[ ! -s "$work/s.err" ] || fail "same settings: $(cat "$work/s.err")"
"$S" run $R "${small[@]}" train.steps=14 optim.lr=0.002 train.batch=2 data.seed=7 run_dir="$d" train.resume=true \
  >"$work/c.out" 2>"$work/c.err" || fail "resume with changes: $(cat "$work/c.err")"
one_error "$work/c.err" "resuming with settings other than the checkpoint's: data.seed 1 -> 7, optim.lr 0.01 -> 0.002, train.batch 4 -> 2, train.global_batch 4 -> 2, train.steps 10 -> 14" \
  || fail "changed settings: $(cat "$work/c.err")"
grep -q "4 steps in" "$work/c.out" || fail "resume with changes did not train: $(tail -2 "$work/c.out")"
# a resume that is refused (another model) says nothing of settings
"$S" run $R "${small[@]}" model.hidden=64 train.steps=16 run_dir="$d" train.resume=true >/dev/null 2>"$work/x.err"
grep -q "other than the checkpoint's" "$work/x.err" && fail "refused resume noted settings: $(cat "$work/x.err")"

# 3. Data paths: the recipe's relative to its folder, the command line's to the current one.
mkdir -p "$work/proj/data" "$work/elsewhere"
head -c 200000 "$repo/libparallel/src/io/data.c" >"$work/proj/data/corpus.txt"
cat >"$work/proj/recipe.lua" <<'LUA'
local strata = require "strata"
strata.experiment{
  name = "paths",
  model = {layers = 1, hidden = 32, heads = 2, seq = 32},
  data = {source = "text", path = "data/corpus.txt"},
  optim = {warmup = 1},
  train = {steps = 2, batch = 2, eval_every = 0, eval_batches = 1},
  metrics = {plot = false},
}
LUA
(cd "$work/elsewhere" && "$S" run ../proj/recipe.lua run_dir="$work/p1" >"$work/p1.out" 2>&1) \
  || fail "recipe-relative data path: $(tail -3 "$work/p1.out")"
(cd "$work/elsewhere" && "$S" run "$work/proj/recipe.lua" run_dir="$work/p2" >"$work/p2.out" 2>&1) \
  || fail "recipe-relative data path (absolute recipe): $(tail -3 "$work/p2.out")"
cp "$work/proj/data/corpus.txt" "$work/elsewhere/mine.txt"
(cd "$work/elsewhere" && "$S" run ../proj/recipe.lua data.path=mine.txt run_dir="$work/p3" >"$work/p3.out" 2>&1) \
  || fail "command-line data path: $(tail -3 "$work/p3.out")"
(cd "$work/elsewhere" && "$S" run ../proj/recipe.lua data.path=data/corpus.txt run_dir="$work/p4" >/dev/null 2>"$work/p4.err")
grep -qF "data file 'data/corpus.txt': No such file or directory" "$work/p4.err" \
  || fail "a command-line path is not the current folder's: $(cat "$work/p4.err")"
# the repository's own text recipe runs from another folder
(cd "$work/elsewhere" && "$S" run "$repo/recipes/text.lua" train.steps=2 optim.warmup=1 train.eval_every=0 \
  metrics.plot=false run_dir="$work/t" >"$work/t.out" 2>&1) || fail "recipes/text.lua from elsewhere: $(tail -3 "$work/t.out")"

# 4. Errors a command-line setting brings about name it.
"$S" run $R train.steps=10 run_dir="$work/e" >/dev/null 2>"$work/e.err"; rc=$?
[ $rc = 2 ] && one_error "$work/e.err" "command line: train.steps=10: optim.warmup = 50 (set at recipes/quickstart.lua:12): must be below train.steps = 10" \
  || fail "override against the recipe: exit $rc: $(cat "$work/e.err")"
"$S" run $R train.stepz=3 run_dir="$work/e" >/dev/null 2>"$work/e.err"; rc=$?
[ $rc = 2 ] && one_error "$work/e.err" "command line: train.stepz = 3: unknown key (did you mean 'steps'?)" \
  || fail "misspelled override: exit $rc: $(cat "$work/e.err")"
"$S" run $R "${small[@]}" model.hidden=0 run_dir="$work/e" >/dev/null 2>"$work/e.err"; rc=$?
[ $rc = 2 ] && one_error "$work/e.err" "command line: model.hidden = 0: must be >= 1" || fail "bad override value: exit $rc: $(cat "$work/e.err")"
[ ! -e "$work/e" ] || fail "a refused recipe wrote $work/e"

echo "runs: $fails failed"
[ $fails = 0 ]
