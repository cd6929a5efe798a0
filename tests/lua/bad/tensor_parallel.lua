-- expect: 2 tensor_parallel.lua:4: parallel.tp = 2: must be 1 in this build
local strata = require "strata"
strata.experiment{
  parallel = {tp = 2},
}
