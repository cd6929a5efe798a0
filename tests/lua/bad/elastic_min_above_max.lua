-- expect: 2 elastic_min_above_max.lua:6: elastic.min_ranks = 3: exceeds elastic.max_ranks = 2
-- An elastic run shrinks to min_ranks and grows to max_ranks.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 2, seq = 32},
  elastic = {min_ranks = 3, max_ranks = 2},
  train = {steps = 2},
}
