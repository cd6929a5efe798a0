-- expect: 2 lr_batch_without_rule.lua:4: optim.lr_batch = 64: not used with optim.lr_scaling = "none" (the rate does not follow the batch)
local strata = require "strata"
strata.experiment{
  optim = {lr = 1e-3, lr_batch = 64},
}
