-- expect: 2 device_unknown.lua:4: parallel.device = "gpu"
local strata = require "strata"
strata.experiment{
  parallel = {device = "gpu"},
}
