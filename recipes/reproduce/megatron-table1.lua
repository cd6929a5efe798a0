-- Megatron-LM (arXiv 2104.04473), Table 1.
-- Achieved TFLOP/s per A100 of the 1.7B, 18.4B and 145.6B rows; the matmul efficiency is calibrated on the 1.7B row only.
-- Published figures stand beside the planner's, computed from the model,
-- the layout and the cluster (libparallel's cost model, docs/planner.md).
-- Run: strata plan recipes/reproduce/megatron-table1.lua
local strata = require "strata"

local worst = 0
for _, row in ipairs(strata.reproduce("megatron-table1")) do
  worst = math.max(worst, math.abs(row.rel_err))
end
print(string.format("megatron-table1: largest relative error %.1f%%", 100 * worst))
