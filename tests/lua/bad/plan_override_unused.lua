-- expect: 2 command line: model.layers = 4: not used: this recipe calls no strata.experiment and never asked for it with strata.option (strata.plan and strata.plan_search take their settings from the recipe alone)
-- command: plan
-- args: model.layers=4
-- A plan-only recipe has no experiment for a key=value setting to change: it says which setting went unused.
local strata = require "strata"
strata.plan{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256}, cluster = "dgx-a100-80gb", print = false}
