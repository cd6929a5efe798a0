-- expect: 2 name_with_slash.lua:4: name = "a/b": must not contain
local strata = require "strata"
strata.experiment{
  name = "a/b",
}
