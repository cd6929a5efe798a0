-- expect: 2 command line: train.batch = 0: must be >= 1
-- args: train.batch=0
local strata = require "strata"
strata.experiment{}
