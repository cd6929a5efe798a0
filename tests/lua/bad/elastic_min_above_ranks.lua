-- expect: 2 elastic_min_above_ranks.lua:7: elastic.min_ranks = 3: exceeds the 2 ranks the run starts on (strata run -n)
-- launch: -n 2
-- An elastic run starts on at least min_ranks.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 2, seq = 32},
  elastic = {min_ranks = 3},
  train = {steps = 2, batch = 4},
}
