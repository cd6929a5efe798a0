-- expect: 2 activations_cpu.lua:4: parallel.activations = "bf16": keeps the activations in 16 bits on a GPU only (the CPU computes in f32)
local strata = require "strata"
strata.experiment{
  parallel = {activations = "bf16"},
}
