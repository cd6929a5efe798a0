-- expect: 2 val_fraction_one.lua:4: data.val_fraction = 1: must be < 1
local strata = require "strata"
strata.experiment{
  data = {val_fraction = 1},
}
