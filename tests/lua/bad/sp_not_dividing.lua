-- expect: 2 sp_not_dividing.lua:6: parallel.sp = 4: does not divide the 30 tokens per sample
-- Ring self-attention gives each rank T / sp tokens of every sequence.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 2, seq = 30},
  parallel = {sp = 4, dp = 1},
  train = {steps = 2},
}
