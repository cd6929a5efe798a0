-- expect: 2 command line: train.steps = 1e+20: expected integer, got a number too large for one (at most 1099511627776)
-- args: train.steps=1e20
local strata = require "strata"
strata.experiment{}
