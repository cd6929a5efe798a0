-- Prints the 0-based offset of the first 64 bytes of file `needle` inside
-- file `hay` (-1 if absent): strata run tests/lua/find_bytes.lua hay=F needle=G
local strata = require "strata"
local function slurp(p) local f = assert(io.open(p, "rb")) local s = f:read("a") f:close() return s end
local hay, needle = slurp(strata.option("hay", "")), slurp(strata.option("needle", "")):sub(1, 64)
local at = hay:find(needle, 1, true)
print(at and at - 1 or -1)
