-- expect: 2 activations_unknown.lua:4: parallel.activations = "bf8"
local strata = require "strata"
strata.experiment{
  parallel = {device = "cuda", activations = "bf8"},
}
