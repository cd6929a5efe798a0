-- expect: 2 sp_with_tp.lua:6: parallel.sp = 2: ring self-attention runs with data parallelism and ZeRO only
-- Ring self-attention composes with data parallelism, not yet with tensor parallelism.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 2, seq = 32},
  parallel = {sp = 2, tp = 2},
  train = {steps = 2},
}
