-- expect: 2 lr_scaling_bad.lua:4: optim.lr_scaling = "squareroot": expected one of none, linear, sqrt
local strata = require "strata"
strata.experiment{
  optim = {lr = 1e-3, lr_scaling = "squareroot"},
}
