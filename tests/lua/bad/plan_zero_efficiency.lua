-- expect: 2 plan_zero_efficiency.lua:4: plan: params.link_efficiency = 0: must be in (0, 1]
-- An efficiency of 0 would divide by zero (NaN times).
local strata = require "strata"
strata.plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
            cluster = "dgx-a100-80gb", params = {base = "engine", link_efficiency = 0}, print = false}
