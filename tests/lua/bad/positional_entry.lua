-- expect: 2 positional_entry.lua:3: experiment[1] = {...}: positional entries are not allowed
local strata = require "strata"
strata.experiment{
  {layers = 2},
}
