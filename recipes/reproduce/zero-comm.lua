-- ZeRO (arXiv 1910.02054), section 7.
-- Communication per device per step: 2P elements for plain data parallel and stages 1-2, 3P for stage 3.
-- Published figures stand beside the planner's, computed from the model,
-- the layout and the cluster (libparallel's cost model, docs/planner.md).
-- Run: strata plan recipes/reproduce/zero-comm.lua
local strata = require "strata"

local worst = 0
for _, row in ipairs(strata.reproduce("zero-comm")) do
  worst = math.max(worst, math.abs(row.rel_err))
end
print(string.format("zero-comm: largest relative error %.1f%%", 100 * worst))
