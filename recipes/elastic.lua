-- An elastic run over several machines: it starts small, grows with its
-- batch warm-up (GPT-3's batch ramp) up to the machines' slots, and goes on
-- on the ranks left when one fails, from its last checkpoint, with the same
-- global batch and learning rate (docs/failures.md).
--
--   cat hosts                 # node1 slots=8
--                             # node2 slots=8
--   strata run -n 4 --hostfile hosts recipes/elastic.lua
--
-- Under Slurm, from inside an allocation (salloc -N 2 --ntasks-per-node 8):
--   strata run -n 4 recipes/elastic.lua       (slots: SLURM_NTASKS)
-- On one machine, the same with its machines simulated (tests/lua/elastic.sh):
--   STRATA_SIMULATE_NODES=1 strata run -n 2 --hostfile hosts recipes/elastic.lua
--
-- The batch grows from 16 to 64 sequences of microbatches of 4 over the
-- first 200 steps; at 64 the run stops with a checkpoint and the launcher
-- relaunches it on up to max_ranks (the most ranks whose microbatches divide
-- 64 and whose memory the planner says fits). A rank that dies, or hangs
-- past train.collective_timeout, costs the steps since the last checkpoint:
-- the run goes on on as few as min_ranks. Every relaunch is one line on
-- stderr; the metrics continue in one file.
local strata = require "strata"
strata.experiment{
  name = "elastic",
  model = {layers = 4, hidden = 256, heads = 4, seq = 128},
  train = {steps = 2000, batch = 4, batch_start = 16, batch_warmup = 200, global_batch = 64,
           collective_timeout = 1},
  optim = {name = "adamw", lr = 3e-3, warmup = 100, lr_scaling = "sqrt"},
  checkpoint = {every = 100},
  elastic = {min_ranks = 1, max_ranks = 16, max_restarts = 5},
}
