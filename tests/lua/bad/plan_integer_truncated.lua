-- expect: 2 plan_integer_truncated.lua:4: plan: model.layers = 4294967336: must be an integer in 1..2147483647
-- Integers are read as 64 bits and range-checked into the C int, not truncated (2^32 + 40 layers is not 40).
local strata = require "strata"
strata.plan{model = {layers = (1 << 32) + 40, hidden = 64, heads = 4, seq = 64, vocab = 256},
            cluster = "dgx-a100-80gb", print = false}
