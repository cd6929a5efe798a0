-- Writes an llm.c tokenizer file of `vocab` tokens (the 256 bytes, then
-- "t256", "t257", ...) and, when model= is given, a strata checkpoint of
-- weights of a model of that vocabulary (for tests/lua/models.sh).
local strata = require "strata"
local out = strata.option("out", "gpt2_tokenizer.bin")
local vocab = strata.option("vocab", 300)
local model = strata.option("model", "")
local f = assert(io.open(out, "wb"))
local h = {20240328, 2, vocab, vocab - 1}
for i = 5, 256 do h[i] = 0 end
for i = 1, 256 do f:write(string.pack("<I4", h[i])) end
for t = 0, vocab - 1 do
  local s = t < 256 and string.char(t) or ("t" .. t)
  f:write(string.pack("<s1", s))
end
f:close()
if model ~= "" then
  local m <close> = assert(strata.gpt{layers = 1, hidden = 16, heads = 2, seq = 16, vocab = vocab})
  local c = assert(strata.checkpoint.create(model))
  local p = m:params()
  for _, v in ipairs(m:views()) do
    local b = strata.floats(v.numel)
    for i = 1, v.numel do b[i] = p[v.offset + i] end
    assert(c:write("params/" .. v.name, v.shape, 0, b))
  end
  assert(c:set("model", m:config()))
  assert(c:commit())
end
