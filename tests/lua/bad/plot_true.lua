-- expect: 2 plot_true.lua:4: metrics.plot = true: expected string or false, got boolean
local strata = require "strata"
strata.experiment{
  metrics = {plot = true},
}
