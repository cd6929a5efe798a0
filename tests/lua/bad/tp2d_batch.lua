-- expect: 2 tp2d_batch.lua:7: train.batch = 3: does not divide over the 2 row blocks of 2d tensor parallelism
-- Each rank of a 2D mesh keeps whole sequences: the batch divides over its rows.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 4, seq = 32},
  parallel = {tp = 4, tp_mode = "2d"},
  train = {steps = 2, batch = 3},
}
