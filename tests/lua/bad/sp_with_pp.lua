-- expect: 2 sp_with_pp.lua:6: parallel.sp = 2: ring self-attention runs with data and tensor parallelism and ZeRO (parallel.pp = 1
-- Ring self-attention composes with data and tensor parallelism, not yet with pipeline stages.
local strata = require "strata"
strata.experiment{
  model = {layers = 2, hidden = 32, heads = 2, seq = 32},
  parallel = {sp = 2, pp = 2},
  train = {steps = 2},
}
