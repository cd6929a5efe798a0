-- expect: 2 plan_precision_lacking.lua:4: plan: cluster 'dgx1-v100-32gb' has no bf16 peak (the GPU lacks it)
-- A precision the GPU lacks is an error, not a plan at a peak of 0.
local strata = require "strata"
strata.plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
            parallel = {precision = "bf16"}, cluster = "dgx1-v100-32gb", print = false}
