-- expect: 2 tp2d_with_pp.lua:6: parallel.tp_mode = "2d": trains with data parallelism and ZeRO only
-- 2D, 2.5D and 3D tensor parallelism do not compose with pipeline stages yet.
local strata = require "strata"
strata.experiment{
  model = {layers = 2, hidden = 32, heads = 4, seq = 32},
  parallel = {tp = 4, tp_mode = "2d", pp = 2},
  train = {steps = 2, batch = 4},
}
