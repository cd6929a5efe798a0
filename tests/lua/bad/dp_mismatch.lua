-- expect: 2 dp_mismatch.lua:4: parallel.dp = 2: dp*tp*pp*sp = 2 but 1 rank is running (start with strata run -n 2)
local strata = require "strata"
strata.experiment{
  parallel = {dp = 2},
}
