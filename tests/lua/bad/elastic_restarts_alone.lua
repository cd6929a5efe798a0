-- expect: 2 elastic_restarts_alone.lua:6: elastic.max_restarts = 2: not used without elastic.min_ranks (not an elastic run)
-- The relaunches belong to an elastic run, which elastic.min_ranks makes.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 2, seq = 32},
  elastic = {max_restarts = 2},
  train = {steps = 2},
}
