-- expect: 2 syntax_error.lua:5: '}' expected (to close '{' at line 4) near 'train'
local strata = require "strata"
strata.experiment{
  model = {layers = 2
  train = {steps = 5},
}
