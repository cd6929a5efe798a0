-- expect: 2 tp_depth_unread.lua:6: parallel.tp_depth = 2: not used with parallel.tp_mode = "2d" (2.5d only)
-- The depth belongs to 2.5D tensor parallelism alone.
local strata = require "strata"
strata.experiment{
  model = {layers = 1, hidden = 32, heads = 4, seq = 32},
  parallel = {tp = 4, tp_mode = "2d", tp_depth = 2},
  train = {steps = 2, batch = 4},
}
