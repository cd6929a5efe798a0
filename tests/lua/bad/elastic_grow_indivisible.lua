-- expect: 2 elastic_grow_indivisible.lua:7: elastic.max_ranks = 3: no rank count from 3 divides train.global_batch = 32 into microbatches of train.batch = 4: the run could not grow
-- launch: -n 2
-- The warm-up reaches 32 sequences, which 3 ranks cannot take in microbatches of 4.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 2, seq = 32},
  elastic = {min_ranks = 1, max_ranks = 3},
  train = {steps = 20, batch = 4, batch_start = 8, batch_warmup = 10, global_batch = 32},
}
