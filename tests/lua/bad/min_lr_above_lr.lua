-- expect: 2 min_lr_above_lr.lua:4: optim.min_lr = 0.1: exceeds optim.lr = 0.001
local strata = require "strata"
strata.experiment{
  optim = {lr = 1e-3, min_lr = 0.1},
}
