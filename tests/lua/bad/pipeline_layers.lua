-- expect: 2 pipeline_layers.lua:4: parallel.pp = 4: model.layers = 2 do not divide into parallel.pp = 4 stages x 1 chunks
local strata = require "strata"
strata.experiment{
  parallel = {pp = 4},
  model = {layers = 2},
}
