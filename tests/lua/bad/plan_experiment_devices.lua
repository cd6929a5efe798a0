-- expect: 2 plan_experiment_devices.lua:7: parallel.dp = 3: dp*tp*pp*sp = 3 but plan.cluster 'dgx-a100-80gb' has 8 devices
-- command: plan
-- The layout of a recipe planned on a cluster must cover the cluster's devices, as under strata run -n.
local strata = require "strata"
strata.experiment{
  model = {layers = 2, hidden = 64, heads = 4, seq = 64},
  parallel = {dp = 3},
  plan = {cluster = "dgx-a100-80gb"},
}
