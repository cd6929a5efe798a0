-- expect: 2 warmup_too_long.lua:4: optim.warmup = 100: must be below train.steps = 50
local strata = require "strata"
strata.experiment{
  optim = {warmup = 100},
  train = {steps = 50},
}
