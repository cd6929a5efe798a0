-- Lua tests of the strata module's bindings (data, metrics, checkpoint,
-- buffers). Run by `strata run` on 1 rank (tests/lua/tests.mk) and on 2 and
-- 3 ranks (tests/lua/mpi.list); any failed assert exits non-zero.
local strata = require "strata"

local rank, size = strata.world()
local checks = 0
local function check(cond, ...)
  checks = checks + 1
  if not cond then error(string.format(...), 2) end
end
local function raises(pattern, f, ...)
  local ok, err = pcall(f, ...)
  check(not ok, "expected an error matching %q", pattern)
  check(tostring(err):find(pattern, 1, true), "error %q lacks %q", tostring(err), pattern)
end

-- A directory shared by all ranks: rank 0 draws its name, an allreduce
-- shares it (the other ranks contribute 0).
local id = strata.floats(1)
if rank == 0 then math.randomseed(os.time(), math.floor(os.clock() * 1e6)) id[1] = math.random(1, 1 << 22) end
strata.allreduce(id, "sum")
local dir = string.format("/tmp/strata-lua-%d", math.tointeger(id[1]))
if rank == 0 then assert(os.execute("mkdir -p " .. dir)) end
strata.barrier()

-- ---------------------------------------------------------------- buffers
do
  local f = strata.floats{1.5, 2.5, -3}
  check(#f == 3 and f[1] == 1.5 and f[3] == -3, "floats from a table")
  f[2] = 7
  check(f:totable()[2] == 7, "floats set/totable")
  raises("index out of range", function() return f[4] end)
  raises("index out of range", function() f[0] = 1 end)
  local i = strata.ints(4):fill(9)
  check(i[4] == 9 and math.type(i[4]) == "integer", "ints fill")
  raises("strata.floats expected", strata.allreduce, i)
  f:close()
  f:close() -- idempotent
  check(#f == 0, "closed buffer is empty")
end

-- ------------------------------------------------------------------- data
do
  local d <close> = assert(strata.data.open{source = "markov", seq = 16, tokens = 1 << 16, seed = 3})
  check(d:vocab() == 256 and d:seq() == 16, "markov vocab/seq")
  local h = d:entropy_rate()
  check(h > 0.5 and h < math.log(8), "entropy rate %g within (0.5, ln 8)", h)
  local n = d:samples("train")
  check(n == (d:tokens("train") - 1) // 16, "samples %d", n)
  local x, y = d:batch("train", 5, 3)
  check(#x == 48 and #y == 48, "batch sizes")
  for b = 0, 2 do
    for t = 1, 15 do check(y[b * 16 + t] == x[b * 16 + t + 1], "targets are inputs shifted") end
  end
  -- next() on rank r of 2 is batch() at position + r*batch; positions advance by 2*batch.
  local a1 = d:next(1, 2, 3)
  check(d:position() == 6, "position after next: %d", d:position())
  local b1 = d:batch("train", 3, 3)
  check(table.concat(a1:totable(), ",") == table.concat(b1:totable(), ","), "next == batch")
  d:set_position(0)
  local again = d:next(0, 1, 3)
  local first = d:batch("train", 0, 3)
  check(table.concat(again:totable(), ",") == table.concat(first:totable(), ","), "set_position")
  raises("(invalid option 'test')", d.batch, d, "test", 0, 1)
  raises("rank out of range", d.next, d, 2, 2, 1)
  -- expected failures: nil, message, code
  local none, msg, code = strata.data.open{source = "text", path = dir .. "/missing.txt"}
  check(none == nil and msg:find("missing.txt': No such file", 1, true) and code == -8,
        "missing file: %s %s", tostring(msg), tostring(code))
  local tiny = dir .. "/tiny" .. rank .. ".txt"
  local fh = assert(io.open(tiny, "w")) fh:write("hello") fh:close()
  none, msg, code = strata.data.open{source = "text", path = tiny, seq = 64}
  check(none == nil and msg:find("fewer than seq+1 = 65", 1, true) and code == -12, "tiny: %s", msg)
  os.remove(tiny)
  d:close()
  raises("closed data handle", d.vocab, d)
  check(tostring(d) == "strata.data (closed)", "tostring closed")
end

-- ---------------------------------------------------------------- metrics
if rank == 0 then
  local path = dir .. "/metrics.h5"
  local m <close> = assert(strata.metrics.create(path, {"step", "loss", "val_loss"}))
  assert(m:append{step = 1, loss = 2.5})
  assert(m:append{2, 2.25, 2.0})
  assert(m:attr("recipe", "strata.experiment{}"))
  raises("no metric named 'lr'", m.append, m, {step = 3, lr = 0.1})
  m:close()
  local loss = assert(strata.metrics.read(path, "loss"))
  check(#loss == 2 and loss[1] == 2.5 and loss[2] == 2.25, "loss read back")
  local val = assert(strata.metrics.read(path, "val_loss"))
  check(val[1] ~= val[1] and val[2] == 2.0, "NaN where absent")
  local names = assert(strata.metrics.names(path))
  table.sort(names)
  check(table.concat(names, ",") == "loss,step,val_loss", "names")
  local none, msg, code = strata.metrics.read(path, "grad_norm")
  check(none == nil and msg:find("no metric named 'grad_norm'") and code == -13, "missing metric")
  none, msg = strata.metrics.create(dir .. "/nodir/m.h5", {"a"})
  check(none == nil and msg:find("nodir/m.h5", 1, true), "bad path: %s", tostring(msg))
end

-- ------------------------------------------------------------- checkpoint
do
  local path = dir .. "/ckpt.h5"
  local total, shape = 7 * 5, {7, 5}
  -- this rank's contiguous range: uneven split, rank 0 may hold most
  local lo = total * rank // size + (rank > 0 and 1 or 0)
  local hi = total * (rank + 1) // size + (rank + 1 < size and 1 or 0)
  if hi > total then hi = total end
  local mine = strata.floats(hi - lo)
  for i = 1, #mine do mine[i] = (lo + i - 1) * 0.5 end
  local ck = assert(strata.checkpoint.create(path))
  assert(ck:write("w", shape, lo, mine))
  assert(ck:set("step", 42))
  assert(ck:set("rng", {7, -8}))
  assert(ck:set("model", "layers=2"))
  assert(ck:commit())
  raises("closed checkpoint", ck.set, ck, "x", 1)
  -- read back under another partition: each rank reads everything
  local rd <close> = assert(strata.checkpoint.open(path))
  local all = strata.floats(total)
  assert(rd:read("w", shape, 0, all))
  for i = 1, total do check(all[i] == (i - 1) * 0.5, "element %d = %g", i, all[i]) end
  check(rd:get_integers("step")[1] == 42, "step attribute")
  local r = rd:get_integers("rng", 2)
  check(r[1] == 7 and r[2] == -8, "rng attribute")
  check(rd:get_string("model") == "layers=2", "model attribute")
  local s = rd:shape("w")
  check(s[1] == 7 and s[2] == 5, "shape")
  local none, msg, code = rd:read("w", {5, 7}, 0, all)
  check(none == nil and code == -9 and msg:find("has shape [7,5], the model expects [5,7]", 1, true),
        "shape mismatch: %s", tostring(msg))
  none, msg, code = rd:expect("model", "layers=4")
  check(none == nil and code == -9 and msg:find("expected 'layers=4'", 1, true), "expect: %s", tostring(msg))
  none, msg, code = rd:read("nope", {1}, 0, all, 1)
  check(none == nil and code == -13, "missing array")
  rd:close()
  -- truncated: refused on every rank
  strata.barrier()
  if rank == 0 then
    local f = assert(io.open(path, "rb")) local bytes = f:read("a") f:close()
    f = assert(io.open(dir .. "/trunc.h5", "wb")) f:write(bytes:sub(1, #bytes // 2)) f:close()
  end
  strata.barrier()
  none, msg, code = strata.checkpoint.open(dir .. "/trunc.h5")
  check(none == nil and code == -12 and msg:find("trunc.h5", 1, true), "truncated: %s", tostring(msg))
end

-- ------------------------------------------------------ model, optimizer
do
  local none, msg, code = strata.gpt{layers = 1, hidden = 30, heads = 4, seq = 8, vocab = 16}
  check(none == nil and code == -1 and msg:find("hidden 30 is not divisible by heads 4", 1, true),
        "bad model: %s", tostring(msg))
  local m = assert(strata.gpt{layers = 1, hidden = 16, heads = 2, seq = 8, vocab = 32, seed = 5})
  local views = m:views()
  check(views[1].name == "wte" and views[1].shape[1] == 32 and views[1].shape[2] == 16, "wte view")
  local p, g = m:params(), m:grads()
  local last = views[#views]
  check(#p == last.offset + last.numel and #g == #p, "flat arrays cover the views")
  local x, y = strata.ints(2 * 8), strata.ints(2 * 8)
  for i = 1, 16 do x[i] = (i * 7) % 32 y[i] = (i * 7 + 1) % 32 end
  local loss = assert(m:forward(x, y, 2, 8))
  -- at initialisation the logits are near zero: loss near ln(vocab)
  check(math.abs(loss - math.log(32)) < 0.1, "initial loss %g vs ln 32", loss)
  assert(m:backward())
  local o = assert(strata.optimizer{model = m, name = "sgd", lr = 0.5})
  local before = p[1]
  local scale, norm = o:clip(0)
  check(scale == 1 and norm > 0, "clip without a limit: scale %g norm %g", scale, norm)
  assert(o:step(scale))
  check(math.abs(p[1] - (before - 0.5 * g[1])) < 1e-6, "sgd step on the view: %g", p[1])
  check(o:step_count() == 1, "step count")
  local after = assert(m:forward(x, y, 2, 8))
  check(after < loss, "one sgd step lowers the loss: %g -> %g", loss, after)
  raises("(B*T exceeds the inputs)", m.forward, m, x, y, 4, 8)
  m:close()
  raises("view of a closed handle", function() return p[1] end)
  raises("closed model", o.step, o)
end

strata.barrier()
if rank == 0 then os.execute("rm -rf " .. dir) end
print(string.format("test_bindings: rank %d of %d, %d checks passed", rank, size, checks))
