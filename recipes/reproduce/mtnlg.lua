-- MT-NLG 530B (arXiv 2201.11990).
-- 105 layers, h 20480: 8-way tensor x 35-way pipeline = 280 A100 80 GB per replica fits.
-- Published figures stand beside the planner's, computed from the model,
-- the layout and the cluster (libparallel's cost model, docs/planner.md).
-- Run: strata plan recipes/reproduce/mtnlg.lua
local strata = require "strata"

local worst = 0
for _, row in ipairs(strata.reproduce("mtnlg")) do
  worst = math.max(worst, math.abs(row.rel_err))
end
print(string.format("mtnlg: largest relative error %.1f%%", 100 * worst))
