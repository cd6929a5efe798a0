-- expect: 2 unread_loss_scale.lua:4: train.loss_scale = 1024: not used with parallel.precision = "bf16" (fp16 only)
local strata = require "strata"
strata.experiment{
  train = {loss_scale = 1024},
  parallel = {precision = "bf16"},
}
