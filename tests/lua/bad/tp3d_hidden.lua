-- expect: 2 tp3d_hidden.lua:5: model.hidden = 34: does not divide into the 3d blocks of 4
-- The 3D layer cuts its weights in q^2 blocks: hidden must divide by them.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 34, heads = 2, seq = 32},
  parallel = {tp = 8, tp_mode = "3d"},
  train = {steps = 2, batch = 4},
}
