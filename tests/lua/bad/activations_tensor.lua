-- expect: 2 activations_tensor.lua:5: parallel.activations = "f16": is not yet with tensor parallelism (parallel.tp > 1)
local strata = require "strata"
strata.experiment{
  model = {layers = 2},
  parallel = {device = "cuda", activations = "f16", tp = 2},
}
