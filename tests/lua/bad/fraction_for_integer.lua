-- expect: 2 fraction_for_integer.lua:4: train.steps = 10.5: expected integer, got a fraction
local strata = require "strata"
strata.experiment{
  train = {steps = 10.5},
}
