-- Writes llm.c-format shards (header of 256 int32: 20240520, 1, count; then
-- uint16 tokens) with a repeating pattern over tokens 0..999:
--   strata run tests/lua/make_shards.lua dir=DIR
local strata = require "strata"
local dir = strata.option("dir", "")
local function shard(path, n, offset)
  local f = assert(io.open(path, "wb"))
  f:write(string.pack("<i4i4i4", 20240520, 1, n), string.rep("\0", 1024 - 12))
  local t = {}
  for i = 0, n - 1 do t[#t + 1] = string.pack("<I2", ((i + offset) * 37) % 1000) end
  f:write(table.concat(t))
  f:close()
end
shard(dir .. "/train_000.bin", 20000, 0)
shard(dir .. "/train_001.bin", 15000, 7)
shard(dir .. "/val_000.bin", 5000, 3)
