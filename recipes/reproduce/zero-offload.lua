-- ZeRO-Offload (arXiv 2101.06840).
-- Largest model on one 32 GB V100 with plain data parallelism (1.4B) and with ZeRO-Offload (13B); 4P bytes of CPU-GPU traffic per step.
-- Published figures stand beside the planner's, computed from the model,
-- the layout and the cluster (libparallel's cost model, docs/planner.md).
-- Run: strata plan recipes/reproduce/zero-offload.lua
local strata = require "strata"

local worst = 0
for _, row in ipairs(strata.reproduce("zero-offload")) do
  worst = math.max(worst, math.abs(row.rel_err))
end
print(string.format("zero-offload: largest relative error %.1f%%", 100 * worst))
