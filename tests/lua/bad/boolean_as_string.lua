-- expect: 2 boolean_as_string.lua:4: model.recompute = "yes": expected boolean, got string
local strata = require "strata"
strata.experiment{
  model = {recompute = "yes"},
}
