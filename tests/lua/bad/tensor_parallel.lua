-- expect: 2 tensor_parallel.lua:4: parallel.tp = 3: does not divide model.heads = 4 (each tensor rank holds whole heads)
local strata = require "strata"
strata.experiment{
  parallel = {tp = 3},
  model = {heads = 4, hidden = 64},
}
