-- expect: 2 device_cuda_offload.lua:4: parallel.device = "cuda": offload.policy = "static" does not run on a device yet
local strata = require "strata"
strata.experiment{
  parallel = {device = "cuda"},
  offload = {policy = "static"},
}
