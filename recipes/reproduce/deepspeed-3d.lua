-- DeepSpeed 3D parallelism (2020 announcement).
-- 32 workers = 4 pipeline x 4 tensor x 2 data on 8 nodes x 4 GPUs: tensor groups inside a node, stages across nodes; 1F1B efficiency at 4x and 8x the stage count.
-- Published figures stand beside the planner's, computed from the model,
-- the layout and the cluster (libparallel's cost model, docs/planner.md).
-- Run: strata plan recipes/reproduce/deepspeed-3d.lua
local strata = require "strata"

local worst = 0
for _, row in ipairs(strata.reproduce("deepspeed-3d")) do
  worst = math.max(worst, math.abs(row.rel_err))
end
print(string.format("deepspeed-3d: largest relative error %.1f%%", 100 * worst))
