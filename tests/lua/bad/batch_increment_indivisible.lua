-- expect: 2 batch_increment_indivisible.lua:5: train.batch_increment = 12: train.batch_increment = 12 must divide train.batch_start = 8 and train.global_batch = 32
local strata = require "strata"
strata.experiment{
  train = {batch = 4, global_batch = 32, batch_start = 8, batch_warmup = 10,
           batch_increment = 12},
}
