-- expect: 2 command line: parallel.pp=2: parallel.dp = "auto" (its default): tp*pp*sp = 2 ranks hold one copy of the model but 1 rank is running (start with strata run -n 2)
-- args: parallel.pp=2
local strata = require "strata"
strata.experiment{
  model = {layers = 2},
}
