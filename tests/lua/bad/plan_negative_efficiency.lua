-- expect: 2 plan_negative_efficiency.lua:4: plan: params.gemm_efficiency = -0.5: must be in (0, 1]
-- A negative efficiency would give negative TFLOP/s that "fit": every planner parameter has a range.
local strata = require "strata"
strata.plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
            cluster = "dgx-a100-80gb", params = {gemm_efficiency = -0.5}, print = false}
