-- PatrickStar (arXiv 2108.05818).
-- Largest GPT on 8 x V100 32 GB with 240 GB of CPU memory (12B), 1.5x DeepSpeed's on the same node.
-- Published figures stand beside the planner's, computed from the model,
-- the layout and the cluster (libparallel's cost model, docs/planner.md).
-- Run: strata plan recipes/reproduce/patrickstar.lua
local strata = require "strata"

local worst = 0
for _, row in ipairs(strata.reproduce("patrickstar")) do
  worst = math.max(worst, math.abs(row.rel_err))
end
print(string.format("patrickstar: largest relative error %.1f%%", 100 * worst))
