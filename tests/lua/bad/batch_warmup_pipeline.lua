-- expect: 2 batch_warmup_pipeline.lua:5: train.batch_start = 8: a pipeline's microbatches per step are fixed (parallel.pp = 2); batch warm-up needs parallel.pp = 1
local strata = require "strata"
strata.experiment{
  parallel = {pp = 2},
  train = {batch = 4, global_batch = 32, batch_start = 8, batch_warmup = 10},
}
