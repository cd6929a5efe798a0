-- expect: 2 unknown_section_key.lua:6: train.stepz = 5: unknown key (did you mean 'steps'?)
local strata = require "strata"
strata.experiment{
  train = {
    batch = 2,
    stepz = 5,
  },
}
