-- Megatron-LM (arXiv 2104.04473), Table 1.
-- Parameter counts of the 1.7B, 18.4B and 145.6B rows from P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)).
-- Published figures stand beside the planner's, computed from the model,
-- the layout and the cluster (libparallel's cost model, docs/planner.md).
-- Run: strata plan recipes/reproduce/megatron-params.lua
local strata = require "strata"

local worst = 0
for _, row in ipairs(strata.reproduce("megatron-params")) do
  worst = math.max(worst, math.abs(row.rel_err))
end
print(string.format("megatron-params: largest relative error %.1f%%", 100 * worst))
