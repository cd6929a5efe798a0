-- expect: 2 device_cuda_sp.lua:4: parallel.device = "cuda": ring self-attention (parallel.sp > 1) does not run on a device yet
local strata = require "strata"
strata.experiment{
  parallel = {device = "cuda", sp = 2},
}
