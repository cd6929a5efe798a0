-- expect: 2 plan_experiment_cluster.lua:8: plan.cluster = "dgx-a200": unknown cluster 'dgx-a200'; known: dgx1-v100-32gb
-- command: plan
-- A recipe's plan.cluster is checked where it is written.
local strata = require "strata"
strata.experiment{
  model = {layers = 2, hidden = 64, heads = 4, seq = 64},
  train = {steps = 10},
  plan = {cluster = "dgx-a200"},
}
