-- quickstart: a small byte-level GPT on the generated Markov corpus, trained
-- data parallel on 2 ranks (make run). The corpus has a known entropy rate,
-- so the run ends by saying how close its validation loss came to the best
-- any model can do.
local strata = require "strata"

strata.experiment{
  name = "quickstart",
  model = {layers = 2, hidden = 64, heads = 4, seq = 64},
  data = {source = "markov", tokens = 1 << 21, fanout = 8, skew = 1.0, val_fraction = 0.05},
  optim = {name = "adamw", lr = 3e-3, min_lr = 3e-4, warmup = 20, weight_decay = 0.0, clip = 1.0},
  train = {steps = 400, batch = 8, eval_every = 50, eval_batches = 8},
  checkpoint = {every = 100},
}
