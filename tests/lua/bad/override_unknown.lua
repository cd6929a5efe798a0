-- expect: 2 command line: train.stepz = 5: unknown key (did you mean 'steps'?)
-- args: train.stepz=5
local strata = require "strata"
strata.experiment{
  train = {steps = 5},
}
