-- expect: 2 vocab_too_small.lua:4: model.vocab = 100: byte-level data (data.source = "markov") needs at least 256
local strata = require "strata"
strata.experiment{
  model = {vocab = 100},
}
