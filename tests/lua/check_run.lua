-- Checks the metrics of a finished run (and compares two runs bit for bit):
--   strata run tests/lua/check_run.lua a=RUN_DIR [b=RUN_DIR] rows=N eval_every=K
local strata = require "strata"
local a = strata.option("a", "")
local b = strata.option("b", "")
local rows = strata.option("rows", 0)
local eval_every = strata.option("eval_every", 0)
local function read(dir, name)
  return assert(strata.metrics.read(dir .. "/metrics.h5", name))
end
local want = {"comm_bytes", "global_batch", "grad_norm", "loss", "loss_scale", "lr", "mem_peak", "step", "tokens_per_s", "val_loss"}
local names = assert(strata.metrics.names(a .. "/metrics.h5"))
table.sort(names)
assert(table.concat(names, ",") == table.concat(want, ","), "metrics: " .. table.concat(names, ","))
for _, n in ipairs(want) do
  local v = read(a, n)
  assert(#v == rows, string.format("%s has %d rows, want %d", n, #v, rows))
end
local step, loss, val = read(a, "step"), read(a, "loss"), read(a, "val_loss")
for i = 1, rows do
  assert(step[i] == i, "step " .. i)
  assert(loss[i] > 0 and loss[i] < 10, "loss " .. loss[i])
  local evaluated = (eval_every > 0 and i % eval_every == 0) or i == rows
  assert((val[i] == val[i]) == evaluated, "val_loss at row " .. i .. ": " .. val[i])
end
local gn, lr, mem, tps = read(a, "grad_norm"), read(a, "lr"), read(a, "mem_peak"), read(a, "tokens_per_s")
for i = 1, rows do
  assert(gn[i] > 0 and lr[i] > 0 and mem[i] > 0 and tps[i] > 0, "row " .. i)
end
if b ~= "" then
  for _, n in ipairs({"step", "loss", "val_loss", "lr", "grad_norm"}) do
    local x, y = read(a, n), read(b, n)
    assert(#x == #y, n .. ": row counts differ")
    for i = 1, #x do
      assert(string.format("%a", x[i]) == string.format("%a", y[i]),
             string.format("%s row %d: %a vs %a", n, i, x[i], y[i]))
    end
  end
  print("check_run: " .. a .. " and " .. b .. " agree bit for bit")
end
print("check_run: metrics of " .. a .. " are complete")
