-- expect: 2 tp3d_not_cube.lua:6: parallel.tp = 4: is not a cube (3d tensor parallelism needs tp = q^3)
-- 3D tensor parallelism lays the tensor ranks out on a q x q x q cube.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 4, seq = 32},
  parallel = {tp = 4, tp_mode = "3d"},
  train = {steps = 2, batch = 4},
}
