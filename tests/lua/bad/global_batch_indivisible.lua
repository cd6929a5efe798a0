-- expect: 2 global_batch_indivisible.lua:4: train.global_batch = 6: not a multiple of parallel.dp x train.batch = 1 x 4 = 4
local strata = require "strata"
strata.experiment{
  train = {batch = 4, global_batch = 6},
}
