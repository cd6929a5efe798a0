-- expect: 2 eval_without_val.lua:5: train.eval_every = 10: needs validation data
local strata = require "strata"
strata.experiment{
  data = {val_fraction = 0},
  train = {eval_every = 10},
}
