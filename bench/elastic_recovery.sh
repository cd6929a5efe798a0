#!/usr/bin/env bash
# BENCH elastic.recovery: how long an elastic run takes to recover from the
# death of a rank, against the work no recovery can avoid.
#   recovery: from the SIGKILL of rank 1 of 2 (just after a checkpoint) to
#     the end of the first step the relaunched run completes: mpirun ending
#     the job, the launcher relaunching it on 1 rank, MPI, the recipe and
#     the data starting, the checkpoint loading, and that step;
#   unavoidable: that checkpoint's load (the seconds the relaunched run
#     says it took) plus one step of the relaunched run (the median interval
#     between its step lines).
# Printed as rates so that ratio = value / baseline = unavoidable / recovery
# (goal >= 0.5: recovery at most twice the unavoidable work); the seconds
# go to stderr. A GPT of 13M parameters (a 150 MB checkpoint with AdamW's
# state) on the quickstart's Markov data.
set -u
BUILD=${BUILD:-build}
S=$(cd "$BUILD/bin" && pwd)/strata
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/lua/ranks.sh" # worker_of, ckpt_step
export STRATA_THREADS=1
work=$(mktemp -d /tmp/strata-recovery-XXXXXX)
trap 'pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
d=$work/run
# stdout (every step's line, flushed) stamped with the time it arrived
stamp() { while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }
"$S" run -n 2 "$here/../recipes/quickstart.lua" model.layers=4 model.hidden=512 model.heads=8 model.seq=128 \
  data.tokens=262144 train.batch=4 train.steps=16 train.eval_every=0 train.log_every=1 metrics.plot=false \
  optim.warmup=5 checkpoint.every=10 elastic.min_ranks=1 run_dir="$d" 2>"$work/err" | stamp >"$work/out" &
lp=$!
for ((i = 0; i < 6000; i++)); do
  [ "$(ckpt_step "$d/checkpoint.h5" 2>/dev/null)" = 10 ] && break
  kill -0 $lp 2>/dev/null || break
  sleep 0.05
done
w=$(worker_of 1 "$d")
if [ -z "$w" ]; then
  echo "elastic_recovery: no checkpoint at step 10 or no rank 1: $(tail -3 "$work/err")" >&2
  exit 1
fi
t_kill=$EPOCHREALTIME

kill -KILL "$w"
wait $lp
# the relaunched run: its resume line, then its step lines
read -r t_loaded load_s start < <(sed -n "s/^\([0-9.]*\) strata: resumed from .* at step \([0-9]*\) (loaded in \([0-9.]*\) s)$/\1 \3 \2/p" "$work/out" | tail -1)
if [ -z "${start:-}" ]; then
  echo "elastic_recovery: the run did not resume: $(tail -3 "$work/err")" >&2
  exit 1
fi
# the relaunched run's step lines: the first one's time after the kill, then the intervals
mapfile -t t < <(awk -v t_loaded="$t_loaded" -v start="$start" \
  '$2 == "step" && $1 > t_loaded { split($3, s, "/"); if (s[1] > start) print $1 }' "$work/out")
if [ ${#t[@]} -lt 4 ]; then
  echo "elastic_recovery: ${#t[@]} steps after the relaunch" >&2
  exit 1
fi
step=$(printf '%s\n' "${t[@]}" | awk 'NR > 1 {print $1 - prev} {prev = $1}' | sort -g |
  awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
awk -v rec="$(awk -v a="${t[0]}" -v b="$t_kill" 'BEGIN {print a - b}')" -v load_s="$load_s" -v step="$step" 'BEGIN {
  base = load_s + step
  printf "elastic_recovery: recovery %.2f s (the kill to the relaunched run'"'"'s first step); checkpoint load %.2f s + step %.2f s = %.2f s\n", rec, load_s, step, base > "/dev/stderr"
  printf "BENCH elastic.recovery value=%.4f unit=1/s baseline=%.4f ratio=%.3f\n", 1 / rec, 1 / base, base / rec
}'
