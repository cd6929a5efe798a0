-- expect: 2 lr_scaled_too_high.lua:5: optim.lr_batch = 1: optim.lr = 100.0 scaled to the global batch 256 gives 25600.0, above 10^4
local strata = require "strata"
strata.experiment{
  optim = {name = "sgd", lr = 100.0, lr_scaling = "linear",
           lr_batch = 1},
  train = {batch = 8, global_batch = 256},
}
