-- Megatron-LM (arXiv 2104.04473), section 5.1.
-- Training time 8 T P / (n X): GPT-3 175B on 1024 A100 in 34 days, 1T on 3072 A100 in 84 days.
-- Published figures stand beside the planner's, computed from the model,
-- the layout and the cluster (libparallel's cost model, docs/planner.md).
-- Run: strata plan recipes/reproduce/megatron-time.lua
local strata = require "strata"

local worst = 0
for _, row in ipairs(strata.reproduce("megatron-time")) do
  worst = math.max(worst, math.abs(row.rel_err))
end
print(string.format("megatron-time: largest relative error %.1f%%", 100 * worst))
