-- expect: 2 plan_experiment_vocab.lua:6: model.vocab = "auto": strata plan does not read the data (data.source = "uint16"): set model.vocab
-- command: plan
-- Planning a tokenised corpus needs its vocabulary: not 256 bytes assumed silently.
local strata = require "strata"
strata.experiment{
  model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = "auto"},
  data = {source = "uint16", path = "/nonexistent/tokens.bin"},
}
