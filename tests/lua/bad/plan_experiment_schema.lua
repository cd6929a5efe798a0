-- expect: 2 plan_experiment_schema.lua:7: train.stepz = 5: unknown key (did you mean 'steps'?)
-- command: plan
-- Under `strata plan`, strata.experiment checks the recipe against the same schema as `strata run`.
local strata = require "strata"
strata.experiment{
  model = {layers = 2, hidden = 64, heads = 4, seq = 64},
  train = {stepz = 5},
}
