-- expect: 2 nan_lr.lua:4: optim.lr = nan: must be a finite number
local strata = require "strata"
strata.experiment{
  optim = {lr = 0/0},
}
