-- expect: 2 unknown_top_key.lua:5: modle = {...}: unknown key (did you mean 'model'?)
local strata = require "strata"
strata.experiment{
  name = "t",
  modle = {layers = 2},
}
