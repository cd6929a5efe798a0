#!/usr/bin/env bash
# recipes/reproduce/large-batch.lua at a tiny setting (seconds): it writes
# the study's HDF5 file, its table and plots; the batch warm-up and the
# learning-rate rule of one run match their closed forms
# (tests/lua/check_large_batch.lua).
set -u
BUILD=${BUILD:-build}
S=$(cd "$BUILD/bin" && pwd)/strata
work=$(mktemp -d /tmp/strata-lb-XXXXXX)
trap 'rm -rf "$work"' EXIT
export STRATA_THREADS=1
args=(batches=2,16 sequences=128 micro=2 hidden=16 layers=1 heads=2 seq=16 evals=4 eval_batches=2
      batch_warmup=0.5 lr_momentum=0.1 markov_tokens=16384)
if ! "$S" run recipes/reproduce/large-batch.lua out="$work" "${args[@]}" >"$work/log" 2>&1; then
  echo "FAIL: the recipe: $(tail -5 "$work/log")"; exit 1
fi
for f in large-batch.h5 table.md gap.png steps.png trust.png; do
  [ -s "$work/$f" ] || { echo "FAIL: no $f"; exit 1; }
done
"$S" run tests/lua/check_large_batch.lua out="$work" corpora=2 optims=4 batches=2 sequences=128 lr_momentum=0.1 \
  || { echo "FAIL: check_large_batch"; exit 1; }
