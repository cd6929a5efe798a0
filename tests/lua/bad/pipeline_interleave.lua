-- expect: 2 pipeline_interleave.lua:4: parallel.interleave = 2: needs parallel.schedule = "interleaved" (not "1f1b")
local strata = require "strata"
strata.experiment{
  parallel = {pp = 2, interleave = 2},
  model = {layers = 4},
}
