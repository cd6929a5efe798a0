-- text: a byte-level GPT on text files, here strata's own C sources (every
-- file matching the glob is a shard; the last 10% of each is validation).
-- The path below is relative to this file's folder, so the recipe runs from
-- any directory; one given on the command line is relative to the current
-- directory:  strata run recipes/text.lua data.path='books/*.txt'
local strata = require "strata"

strata.experiment{
  name = "text",
  model = {layers = 2, hidden = 96, heads = 4, seq = 128},
  data = {source = "text", path = "../lib*/src/*.c", val_fraction = 0.1},
  optim = {name = "adamw", lr = 3e-3, min_lr = 3e-4, warmup = 50, weight_decay = 0.01},
  train = {steps = 600, batch = 8, eval_every = 100, eval_batches = 8, log_every = 50},
}
