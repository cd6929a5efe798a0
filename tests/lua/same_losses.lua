-- Exits non-zero unless metric `name` of two metrics files is identical bit
-- for bit: strata run tests/lua/same_losses.lua a=A.h5 b=B.h5 [name=loss]
local strata = require "strata"
local name = strata.option("name", "loss")
local x = assert(strata.metrics.read(strata.option("a", ""), name))
local y = assert(strata.metrics.read(strata.option("b", ""), name))
assert(#x == #y and #x > 0, string.format("%s: %d vs %d rows", name, #x, #y))
for i = 1, #x do
  assert(string.format("%a", x[i]) == string.format("%a", y[i]),
         string.format("%s row %d: %.9g vs %.9g", name, i, x[i], y[i]))
end
print(string.format("same_losses: %d rows of %s agree", #x, name))
