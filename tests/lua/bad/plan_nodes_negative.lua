-- expect: 2 plan_nodes_negative.lua:4: plan: cluster.nodes = -32: must be an integer in 1..1000000
-- A known cluster key with a bad value is an invalid value, not an unknown key.
local strata = require "strata"
strata.plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
            cluster = {base = "dgx-a100-80gb", nodes = -32}, print = false}
