-- expect: 2 plan_search_no_batch.lua:4: plan_search: global_batch is required: the sequences of one optimizer step
-- The search needs the global batch every layout shares, and says so.
local strata = require "strata"
strata.plan_search{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
                   cluster = "dgx-a100-80gb", print = false}
