-- expect: 2 unknown_optimizer.lua:4: optim.name = "adam": expected one of adamw, sgd, momentum, nesterov, lamb, lars
local strata = require "strata"
strata.experiment{
  optim = {name = "adam"},
}
