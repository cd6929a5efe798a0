-- Will Megatron's 18.4B model fit, and how fast does it train? A plan-only
-- recipe: the prediction for the published layout on DGX A100 80 GB nodes,
-- then the best layouts the planner finds for the same 256 GPUs.
-- Run: strata plan recipes/plan-megatron-18b.lua
local strata = require "strata"

local model = {layers = 40, hidden = 6144, heads = 48, seq = 2048, vocab = 51200, recompute = true}
local cluster = {base = "dgx-a100-80gb", nodes = 32}

strata.plan{
  model = model,
  parallel = {dp = 32, tp = 8, pp = 1, microbatch = 1, global_batch = 1024, precision = "fp16"},
  cluster = cluster,
}
strata.plan_search{model = model, cluster = cluster, global_batch = 1024, precision = "fp16", top = 5}
