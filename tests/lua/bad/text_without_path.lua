-- expect: 2 text_without_path.lua:4: data.path = nil: required for data.source = "text"
local strata = require "strata"
strata.experiment{
  data = {source = "text"},
}
