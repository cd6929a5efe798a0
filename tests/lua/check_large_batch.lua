-- Checks a tiny run of recipes/reproduce/large-batch.lua (tests/lua/large_batch.sh):
--   strata run tests/lua/check_large_batch.lua out=DIR corpora=2 optims=4 batches=2 sequences=N lr_momentum=X
-- the study's file and table, its trust-ratio rows, and one run's batch
-- warm-up and learning rates against their closed forms.
local strata = require "strata"
local out = strata.option("out", "")
local ncorp, nopt, nb = strata.option("corpora", 0), strata.option("optims", 0), strata.option("batches", 0)
local sequences, lr0 = strata.option("sequences", 0), strata.option("lr_momentum", 0.0)
local function check(ok, msg) if not ok then error("check_large_batch: " .. msg, 0) end end

local f = out .. "/large-batch.h5"
local kind = assert(strata.metrics.read(f, "kind"))
local function col(n) return assert(strata.metrics.read(f, n)) end
local batch, gap, tmean, tmin, tmax, opt = col("batch"), col("gap"), col("trust_mean"), col("trust_min"), col("trust_max"), col("optimizer")
local summaries, trust, evals = 0, 0, 0
for i = 1, #kind do
  if kind[i] == 1 then evals = evals + 1 end
  if kind[i] == 2 then summaries = summaries + 1; check(gap[i] == gap[i], "summary row " .. i .. " has no gap") end
  if kind[i] == 3 then
    trust = trust + 1
    check(tmin[i] > 0 and tmin[i] <= tmean[i] and tmean[i] <= tmax[i], "trust row " .. i .. " out of order")
  end
end
check(summaries == ncorp * nopt * nb, string.format("%d summary rows, want %d", summaries, ncorp * nopt * nb))
check(evals >= summaries, "evaluations missing")
-- LAMB and LARS runs (2 of the optimizers): embeddings and one block each
check(trust == ncorp * 2 * nb * 2, string.format("%d trust rows, want %d", trust, ncorp * 2 * nb * 2))

local t = assert(io.open(out .. "/table.md")):read("a")
check(t:find("| optimizer (rule) |", 1, true) and t:find("| lamb (sqrt) |", 1, true)
      and t:find("| momentum (linear) |", 1, true) and t:find("**markov** (reference entropy rate", 1, true),
      "table.md lacks its rows:\n" .. t)

-- The largest batch's momentum run on Markov data: batch warm-up over half
-- of its S steps from one microbatch m (2) in steps of m, B(t) = m + m
-- floor(n t / W), n = (B - m) / m, W = floor(S / 2); learning rate (linear
-- rule, tuned at 8) lr0 B(t) / 8 times the cosine from 1 to 0.1 over S
-- steps (no warm-up: floor(0.1 S) = 0 for S < 10): 0.1 + 0.9 (1 + cos(pi t / S)) / 2.
local B = 16
local m, S = 2, sequences // B
local W, n = S // 2, (B - m) // m
local dir = out .. "/runs/markov-momentum-b" .. B
local gb, lr = assert(strata.metrics.read(dir .. "/metrics.h5", "global_batch")), assert(strata.metrics.read(dir .. "/metrics.h5", "lr"))
check(#gb == S, string.format("%d rows, want %d", #gb, S))
for i = 1, S do
  local tt = i - 1
  local want = tt < W and m + m * ((n * tt) // W) or B
  check(gb[i] == want, string.format("step %d: global batch %g, want %d", i, gb[i], want))
  local f = 0.1 + 0.9 * (1 + math.cos(math.pi * tt / S)) / 2
  local wlr = lr0 * want / 8 * f
  -- two float32 roundings (the group's rate, then the scheduled rate): 2^-23 each
  check(math.abs(lr[i] - wlr) <= 1e-6 * wlr, string.format("step %d: lr %.9g, want %.9g", i, lr[i], wlr))
end
print("check_large_batch: ok")
