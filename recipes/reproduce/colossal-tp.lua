-- Colossal-AI tensor parallelism (arXiv 2110.14883 and companions).
-- Per-layer bandwidth terms of 1D, 2D, 2.5D and 3D tensor parallelism, and 999 vs 9 partners at 1000 processors.
-- Published figures stand beside the planner's, computed from the model,
-- the layout and the cluster (libparallel's cost model, docs/planner.md).
-- Run: strata plan recipes/reproduce/colossal-tp.lua
local strata = require "strata"

local worst = 0
for _, row in ipairs(strata.reproduce("colossal-tp")) do
  worst = math.max(worst, math.abs(row.rel_err))
end
print(string.format("colossal-tp: largest relative error %.1f%%", 100 * worst))
