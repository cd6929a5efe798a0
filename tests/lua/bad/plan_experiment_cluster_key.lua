-- expect: 2 plan_experiment_cluster_key.lua:7: plan.cluster = {...}: cluster.nodes = 0: must be an integer in 1..1000000
-- command: plan
-- A recipe's plan.cluster table is checked field by field where it is written.
local strata = require "strata"
strata.experiment{
  model = {layers = 2, hidden = 64, heads = 4, seq = 64},
  plan = {cluster = {base = "dgx-a100-80gb", nodes = 0}},
}
