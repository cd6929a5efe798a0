-- expect: 1 runtime_error.lua:4: the recipe failed on purpose
local strata = require "strata"
local x = 1
error("the recipe failed on purpose")
