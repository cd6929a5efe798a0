-- expect: 2 tp2d_not_square.lua:6: parallel.tp = 8: is not a square (2d tensor parallelism needs tp = q^2)
-- 2D tensor parallelism lays the tensor ranks out on a q x q mesh.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 4, seq = 32},
  parallel = {tp = 8, tp_mode = "2d"},
  train = {steps = 2, batch = 4},
}
