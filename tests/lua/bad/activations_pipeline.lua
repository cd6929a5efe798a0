-- expect: 2 activations_pipeline.lua:5: parallel.activations = "f16": is not yet with pipeline stages (parallel.pp > 1)
local strata = require "strata"
strata.experiment{
  model = {layers = 2},
  parallel = {device = "cuda", activations = "f16", pp = 2},
}
