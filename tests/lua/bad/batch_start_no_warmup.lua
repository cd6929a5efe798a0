-- expect: 2 batch_start_no_warmup.lua:4: train.batch_start = 8: needs train.batch_warmup (steps) or train.batch_warmup_tokens over which the batch grows
local strata = require "strata"
strata.experiment{
  train = {batch = 4, global_batch = 32, batch_start = 8},
}
