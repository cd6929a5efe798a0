-- expect: 2 fanout_zero.lua:4: data.fanout = 0: must be >= 1
local strata = require "strata"
strata.experiment{
  data = {fanout = 0},
}
