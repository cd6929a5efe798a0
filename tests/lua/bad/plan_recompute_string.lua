-- expect: 2 plan_recompute_string.lua:4: plan: model.recompute = "no": expected true or false
-- "no" is a string, not false: only booleans switch recompute.
local strata = require "strata"
strata.plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256, recompute = "no"},
            cluster = "dgx-a100-80gb", print = false}
