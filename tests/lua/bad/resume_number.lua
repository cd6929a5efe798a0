-- expect: 2 resume_number.lua:4: train.resume = 5: expected boolean or string, got number
local strata = require "strata"
strata.experiment{
  train = {resume = 5},
}
