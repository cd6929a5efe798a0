-- expect: 2 elastic_shrink_indivisible.lua:7: elastic.min_ranks = 3: no rank count from 3 divides train.global_batch = 32 into microbatches of train.batch = 4: the run could not go on after a failure
-- launch: -n 4
-- 4 ranks take 32 sequences in 2 microbatches of 4 each; 3 ranks cannot.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 2, seq = 32},
  elastic = {min_ranks = 3},
  train = {steps = 2, batch = 4, global_batch = 32},
}
