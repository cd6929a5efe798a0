-- expect: 2 string_for_integer.lua:4: model.hidden = "64": expected integer, got string
local strata = require "strata"
strata.experiment{
  model = {hidden = "64"},
}
