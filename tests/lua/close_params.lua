-- Exits non-zero unless the parameters of two checkpoints agree to within
-- `tol`, as the largest difference over the largest magnitude:
--   strata run tests/lua/close_params.lua a=A.h5 b=B.h5 [tol=1e-4]
-- tol=0 asks for the same values to the bit (tests/lua/elastic.sh: a run
-- relaunched elastically against a resume by hand from the same checkpoint
-- on the same ranks: the same computation in the same order).
local strata = require "strata"
local a, b = strata.option("a", ""), strata.option("b", "")
local tol = strata.option("tol", 1e-4)
local ma <close> = assert(strata.gpt{init = a})
local mb <close> = assert(strata.gpt{init = b})
local pa, pb = ma:params(), mb:params()
assert(#pa == #pb and #pa > 0, string.format("%d vs %d parameters", #pa, #pb))
local diff, scale = 0, 0
for i = 1, #pa do
  diff = math.max(diff, math.abs(pa[i] - pb[i]))
  scale = math.max(scale, math.abs(pb[i]))
end
assert(diff <= tol * scale, string.format("parameters differ by %.3g, %.3g of their largest magnitude %.3g (tolerance %.0e)",
                                          diff, diff / scale, scale, tol))
print(string.format("%d parameters agree to %.1e of their largest magnitude (tolerance %.0e)", #pa, diff / scale, tol))
