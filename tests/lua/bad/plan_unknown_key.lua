-- expect: 2 plan_unknown_key.lua:4: plan: unknown key 'paralel' (keys: model, parallel, cluster, params, print)
-- A misspelled section of strata.plan is an error, not the default layout planned silently.
local strata = require "strata"
strata.plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
            paralel = {tp = 2}, cluster = "dgx-a100-80gb", print = false}
