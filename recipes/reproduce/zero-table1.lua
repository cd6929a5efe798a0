-- ZeRO (arXiv 1910.02054), Table 1.
-- Model-state memory per device for 7.5B, 128B and 1T parameters under stages 1, 2 and 3 at Nd = 1..1024 (18 cells).
-- Published figures stand beside the planner's, computed from the model,
-- the layout and the cluster (libparallel's cost model, docs/planner.md).
-- Run: strata plan recipes/reproduce/zero-table1.lua
local strata = require "strata"

local worst = 0
for _, row in ipairs(strata.reproduce("zero-table1")) do
  worst = math.max(worst, math.abs(row.rel_err))
end
print(string.format("zero-table1: largest relative error %.1f%%", 100 * worst))
