-- expect: 2 batch_warmup_both.lua:5: train.batch_warmup_tokens = 100000: a second warm-up length: give train.batch_warmup = 10 steps or tokens, not both
local strata = require "strata"
strata.experiment{
  train = {batch = 4, global_batch = 32, batch_start = 8, batch_warmup = 10,
           batch_warmup_tokens = 100000},
}
