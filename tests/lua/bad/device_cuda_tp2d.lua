-- expect: 2 device_cuda_tp2d.lua:4: parallel.device = "cuda": tensor parallelism with parallel.tp_mode = "2d" does not run on a device yet
local strata = require "strata"
strata.experiment{
  parallel = {device = "cuda", tp = 4, tp_mode = "2d"},
}
