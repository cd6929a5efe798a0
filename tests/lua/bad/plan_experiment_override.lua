-- expect: 2 command line: parallel.tp = 3: does not divide model.heads = 4 (each tensor rank holds whole heads)
-- command: plan
-- args: parallel.tp=3
-- Under `strata plan`, key=value settings apply to strata.experiment's recipe and are checked as under `strata run`.
local strata = require "strata"
strata.experiment{model = {layers = 2, hidden = 64, heads = 4, seq = 64}}
