-- expect: 2 batch_warmup_no_start.lua:4: train.batch_warmup = 10: needs train.batch_start, the global batch of the first step
local strata = require "strata"
strata.experiment{
  train = {batch = 4, global_batch = 32, batch_warmup = 10},
}
