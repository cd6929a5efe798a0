-- quickstart: a small byte-level GPT on the generated Markov corpus, trained
-- data parallel on 2 ranks (`make run`, or `strata run -n 2 recipes/quickstart.lua`).
-- The corpus comes from a seeded sparse Markov chain whose entropy rate is
-- known exactly, so the run ends by saying how close its validation loss
-- came to the best any model can do.
local strata = require "strata"

strata.experiment{
  name = "quickstart",
  model = {layers = 2, hidden = 64, heads = 4, seq = 64},
  data = {source = "markov", tokens = 1 << 22, fanout = 8, skew = 1.0, val_fraction = 0.05},
  optim = {name = "adamw", lr = 1e-2, min_lr = 1e-3, warmup = 50, schedule = "cosine", clip = 1.0},
  train = {steps = 1500, batch = 8, eval_every = 100, eval_batches = 16, log_every = 50},
  checkpoint = {every = 500},
}
