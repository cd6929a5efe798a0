-- expect: 2 command line: train.steps=10: optim.warmup = 50 (set at 
-- args: train.steps=10
local strata = require "strata"
strata.experiment{
  optim = {warmup = 50},
  train = {steps = 100},
}
