-- expect: 2 command line: optim.momentum = 0.5: not used by optim.name = "adamw" (momentum, nesterov and lars only)
-- args: optim.momentum=0.5
local strata = require "strata"
strata.experiment{
  optim = {name = "adamw"},
}
