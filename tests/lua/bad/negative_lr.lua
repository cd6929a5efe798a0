-- expect: 2 negative_lr.lua:5: optim.lr = -0.1: must be > 0
local strata = require "strata"
strata.experiment{
  optim = {
    lr = -0.1,
  },
}
