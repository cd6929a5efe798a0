-- expect: 2 bucket_zero.lua:4: parallel.bucket_mb = 0: must be > 0
local strata = require "strata"
strata.experiment{
  parallel = {zero = 1, bucket_mb = 0},
}
