# Shell helpers of the tests that act on a run's ranks (sourced).
# The worker process of rank R of a run whose run_dir is DIR: the strata
# process with OMPI_COMM_WORLD_RANK=R whose parent (its guard) is strata too.
worker_of() {
  local p
  for p in $(pgrep -f "run_dir=$2"); do
    { tr '\0' '\n' </proc/"$p"/environ; } 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" || continue
    grep -qx strata /proc/"$(awk '{print $4}' /proc/"$p"/stat)"/comm 2>/dev/null && { echo "$p"; return; }
  done
}
# the step attribute of a checkpoint
ckpt_step() { h5dump -a /step "$1" 2>/dev/null | sed -n 's/^ *(0): \([0-9]*\).*/\1/p'; }
