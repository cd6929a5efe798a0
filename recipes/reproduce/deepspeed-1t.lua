-- DeepSpeed 3D parallelism (2020 announcement).
-- A trillion-parameter model needs about 16 TB for model states: 400 A100 40 GB just to hold them.
-- Published figures stand beside the planner's, computed from the model,
-- the layout and the cluster (libparallel's cost model, docs/planner.md).
-- Run: strata plan recipes/reproduce/deepspeed-1t.lua
local strata = require "strata"

local worst = 0
for _, row in ipairs(strata.reproduce("deepspeed-1t")) do
  worst = math.max(worst, math.abs(row.rel_err))
end
print(string.format("deepspeed-1t: largest relative error %.1f%%", 100 * worst))
