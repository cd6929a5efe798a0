-- expect: 2 section_not_table.lua:4: train = 5: expected a table (section), got number
local strata = require "strata"
strata.experiment{
  train = 5,
}
