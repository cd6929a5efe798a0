-- expect: 2 partition_without_recompute.lua:4: parallel.partition_activations = true: needs model.recompute = true (it splits the block inputs recompute keeps)
local strata = require "strata"
strata.experiment{
  parallel = {tp = 2, partition_activations = true},
}
