-- Exits non-zero unless the training losses of two metrics files agree at
-- every step after `after`, to within `tol` (relative):
--   strata run tests/lua/close_losses.lua a=A.h5 b=B.h5 after=S [tol=1e-5]
-- The runs compared are the same computation with sums in another order
-- (one rank's microbatches added in turn, or four ranks' allreduced):
-- float32 rounding, 6e-8 relative per operation, makes the parameters
-- differ by at most about 1e-6 after a hundred steps of AdamW (tests/train/
-- zero_equiv.c bounds such pairs by 1e-6; tests/lua/elastic.sh's 1 -> 4
-- ranks measure 5e-8 on the losses), and the losses by as much; 1e-5
-- leaves an order of magnitude over that bound, while a wrong batch
-- schedule, learning rate or data order moves the loss by 1e-4 to 1e-2
-- within a step (a batch growing by 2 instead of 8: 7e-4 at the first
-- step compared).
local strata = require "strata"
local a, b = strata.option("a", ""), strata.option("b", "")
local after, tol = strata.option("after", 0), strata.option("tol", 1e-5)
local function by_step(file)
  local steps, loss = assert(strata.metrics.read(file, "step")), assert(strata.metrics.read(file, "loss"))
  local t = {}
  for i = 1, #steps do t[math.tointeger(steps[i])] = loss[i] end
  return t, #steps
end
local x = by_step(a)
local y, rows = by_step(b)
local n, worst = 0, 0
for s = after + 1, math.maxinteger do
  if not y[s] then break end
  assert(x[s], string.format("step %d: in %s only", s, b))
  local d = math.abs(x[s] - y[s]) / math.abs(y[s])
  assert(d <= tol, string.format("step %d: loss %.9g vs %.9g (relative %.2e > %.0e)", s, x[s], y[s], d, tol))
  n, worst = n + 1, math.max(worst, d)
end
assert(n > 0 and n == rows - after, string.format("%d steps compared of %d after step %d", n, rows - after, after))
print(string.format("losses of %d steps after step %d agree to %.1e relative (tolerance %.0e)", n, after, worst, tol))
