-- expect: 2 heads_not_dividing.lua:4: model.heads = 5: does not divide model.hidden = 64
local strata = require "strata"
strata.experiment{
  model = {hidden = 64, heads = 5},
}
