-- expect: 2 plan_cluster_bandwidth.lua:4: plan: cluster.intra_bw = 0: must be > 0
-- Every cluster field is checked against its range, which the message states.
local strata = require "strata"
strata.plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
            cluster = {base = "dgx-a100-80gb", intra_bw = 0}, print = false}
