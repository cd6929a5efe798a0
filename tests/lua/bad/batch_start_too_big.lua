-- expect: 2 batch_start_too_big.lua:5: train.batch_start = 64: exceeds train.global_batch = 32, where the warm-up ends
local strata = require "strata"
strata.experiment{
  train = {batch = 4, global_batch = 32,
           batch_start = 64, batch_warmup = 10},
}
