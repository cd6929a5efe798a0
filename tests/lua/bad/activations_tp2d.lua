-- expect: 2 activations_tp2d.lua:5: parallel.activations = "bf16": is not yet with tp_mode = "2d" (its layers keep f32 activations; tp_mode = "1d" takes them)
local strata = require "strata"
strata.experiment{
  model = {layers = 2},
  parallel = {device = "cuda", activations = "bf16", tp = 4, tp_mode = "2d"},
}
