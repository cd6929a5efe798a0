-- expect: 2 elastic_more_than_slots.lua:7: elastic.max_ranks = 8: exceeds the 4 slots of hostfile hosts4
-- launch: -n 2 --hostfile hosts4
-- An elastic run grows on the machines it was given, no further.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 2, seq = 32},
  elastic = {min_ranks = 1, max_ranks = 8},
  train = {steps = 20, batch = 4, batch_start = 8, batch_warmup = 10, global_batch = 32},
}
