-- expect: 2 plan_invalid_layout.lua:4: plan: heads 4 are not divisible by the 1d tensor split 3
-- A layout the planner cannot place is an error at the recipe's line (exit 2), not a plan marked invalid.
local strata = require "strata"
strata.plan{model = {layers = 2, hidden = 96, heads = 4, seq = 64, vocab = 256},
            parallel = {tp = 3, dp = 1}, cluster = {base = "dgx-a100-80gb", gpus_per_node = 3}, print = false}
