-- expect: 2 pipeline_microbatches.lua:4: parallel.microbatches = 8: disagrees with train.accum = 2 (both are the microbatches per step)
local strata = require "strata"
strata.experiment{
  parallel = {pp = 2, microbatches = 8},
  train = {accum = 2},
}
