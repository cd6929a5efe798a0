-- expect: 2 experiment_not_table.lua:3: experiment = "quickstart": expected a table
local strata = require "strata"
strata.experiment("quickstart")
