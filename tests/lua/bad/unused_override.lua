-- expect: 2 command line: train.steps = 50: not used: this recipe calls no strata.experiment
-- args: train.steps=50
local strata = require "strata"
local n = strata.option("model.layers", 2)
assert(n == 2)
