-- expect: 2 plan_search_precision.lua:4: plan_search: precision[2] = "fp8": expected one of fp32, bf16, fp16
-- The search's precision is one name or a list of them to try.
local strata = require "strata"
strata.plan_search{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
                   cluster = "dgx-a100-80gb", global_batch = 64, precision = {"bf16", "fp8"}, print = false}
