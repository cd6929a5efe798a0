-- expect: 1 bad llm.c magic 1234 (expected 20240520)
local strata = require "strata"
local path = os.tmpname()
local f = assert(io.open(path, "wb"))
f:write(string.pack("<i4i4i4", 1234, 1, 100), string.rep("\0", 1012 + 200))
f:close()
local ok, err = pcall(strata.experiment, {data = {source = "llmc", path = path}})
os.remove(path)
error(err, 0)
