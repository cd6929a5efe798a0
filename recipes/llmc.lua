-- llmc: GPT-2-tokenised data prepared for llm.c (its .bin shards: a header
-- of 256 int32 with magic 20240520, version 1 and the token count, then
-- uint16 tokens), e.g. from llm.c's dev/data/fineweb.py. Give the shards:
--   strata run -n 2 recipes/llmc.lua data.path='fineweb10B/fineweb_train_*.bin' \
--       data.val_path='fineweb10B/fineweb_val_*.bin'
-- (paths on the command line are relative to the current directory; the
-- defaults below, like every relative path in a recipe, to this file's folder)
-- model.vocab 50257 is GPT-2's; the run refuses data with larger token ids.
local strata = require "strata"

strata.experiment{
  name = "llmc",
  model = {layers = 4, hidden = 256, heads = 8, seq = 256, vocab = 50257},
  data = {source = "llmc", path = "dev/data/fineweb10B/fineweb_train_*.bin",
          val_path = "dev/data/fineweb10B/fineweb_val_*.bin"},
  optim = {name = "adamw", lr = 6e-4, min_lr = 6e-5, warmup = 100, weight_decay = 0.1},
  train = {steps = 2000, batch = 8, eval_every = 250, eval_batches = 16, log_every = 50},
  checkpoint = {every = 500},
}
