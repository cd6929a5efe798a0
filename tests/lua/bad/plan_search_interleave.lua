-- expect: 2 plan_search_interleave.lua:4: plan_search: interleave = 1: must be an integer in 2..30
-- Chunks per stage under the interleaved schedule: at least 2.
local strata = require "strata"
strata.plan_search{model = {layers = 8, hidden = 64, heads = 4, seq = 64, vocab = 256},
                   cluster = "dgx-a100-80gb", global_batch = 64, schedule = "interleaved", interleave = 1,
                   print = false}
