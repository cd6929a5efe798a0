-- expect: 2 tp2d_heads.lua:5: model.heads = 3: does not divide over the 2d mesh's side q = 2
-- Each rank of a 2D mesh holds whole heads: the heads divide over the mesh's columns.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 48, heads = 3, seq = 32},
  parallel = {tp = 4, tp_mode = "2d"},
  train = {steps = 2, batch = 4},
}
