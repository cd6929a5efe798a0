-- expect: 2 plan_overlap_range.lua:4: plan: params.dp_overlap = 1.5: must be in [0, 1]
-- A fraction of communication hidden is at most all of it.
local strata = require "strata"
strata.plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
            cluster = "dgx-a100-80gb", params = {dp_overlap = 1.5}, print = false}
