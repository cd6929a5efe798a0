-- expect: 2 tensor_parallel_vocab.lua:4: parallel.tp = 2: does not divide model.vocab = 257 (the vocabulary is split over the tensor ranks; pad it)
local strata = require "strata"
strata.experiment{
  parallel = {tp = 2},
  model = {vocab = 257},
}
