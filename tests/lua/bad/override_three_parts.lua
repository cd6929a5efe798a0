-- expect: 2 command line: train.steps.max = 5: paths have one or two parts
-- args: train.steps.max=5
local strata = require "strata"
strata.experiment{}
