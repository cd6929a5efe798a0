-- expect: 2 batch_start_indivisible.lua:4: train.batch_start = 6: not a multiple of parallel.dp x train.batch = 1 x 4 = 4 (the batch grows by microbatches)
local strata = require "strata"
strata.experiment{
  train = {batch = 4, global_batch = 32, batch_start = 6, batch_warmup = 10},
}
