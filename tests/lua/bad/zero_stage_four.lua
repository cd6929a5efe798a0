-- expect: 2 zero_stage_four.lua:4: parallel.zero = 4: must be <= 3
local strata = require "strata"
strata.experiment{
  parallel = {zero = 4},
}
