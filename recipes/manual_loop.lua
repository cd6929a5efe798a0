-- manual_loop: the training loop written by hand with strata's lower-level
-- bindings (model forward/backward, optimizer, allreduce, checkpoint),
-- for research that strata.experiment does not cover. On one rank it
-- computes exactly what strata.experiment computes for the same settings.
--
--   strata run recipes/manual_loop.lua [train.steps=200] [out=runs/manual]
--   strata run -n 2 recipes/manual_loop.lua
local strata = require "strata"

local steps = strata.option("train.steps", 200)
local batch = strata.option("train.batch", 8)        -- sequences per rank per step
local out = strata.option("out", "runs/manual")
local cfg = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256, seed = 1}

local rank, size = strata.world()
local data <close> = assert(strata.data.open{source = "markov", seq = cfg.seq, tokens = 1 << 22,
                                             val_fraction = 0.05, seed = 1})
local model <close> = assert(strata.gpt(cfg))
local opt <close> = assert(strata.optimizer{model = model, name = "adamw", lr = 1e-2, min_lr = 1e-3,
                                            warmup = math.min(50, steps - 1), steps = steps,
                                            schedule = "cosine", weight_decay = 0, beta2 = 0.95})
local grads = model:grads()
local inputs, targets = strata.ints(batch * cfg.seq), strata.ints(batch * cfg.seq)

local function validate(batches)
  local sum = strata.floats(1)
  for k = rank, batches - 1, size do
    data:batch("val", k * batch, batch, inputs, targets)
    sum[1] = sum[1] + assert(model:forward(inputs, targets, batch, cfg.seq))
  end
  return strata.allreduce(sum, "sum")[1] / batches
end

if rank == 0 then os.execute("mkdir -p '" .. (out:match("(.*)/") or ".") .. "'") end
local metrics = rank == 0 and assert(strata.metrics.create(out .. ".h5", {"step", "loss", "val_loss"}))
for step = 1, steps do
  data:next(rank, size, batch, inputs, targets)
  model:zero_grad()
  local loss = assert(model:forward(inputs, targets, batch, cfg.seq))
  assert(model:backward())
  if size > 1 then strata.allreduce(grads, "avg") end
  local scale, norm = opt:clip(1.0)
  assert(opt:step(scale))
  local val = (step % 100 == 0 or step == steps) and validate(16) or nil
  if metrics then
    assert(metrics:append{step = step, loss = loss, val_loss = val})
    if val then print(string.format("step %d/%d  loss %.4f  val %.4f  |g| %.3f", step, steps, loss, val, norm)) end
  end
end

-- Save the model and optimizer like the runner does: each rank writes its share.
local ck = assert(strata.checkpoint.create(out .. "-checkpoint.h5"))
local params = model:params()
local m, v = opt:state()
for _, view in ipairs(model:views()) do
  local lo = view.numel * rank // size
  local hi = view.numel * (rank + 1) // size
  local function part(buf) -- this rank's elements of the view, as a new buffer
    local b = strata.floats(hi - lo)
    for i = 1, hi - lo do b[i] = buf[view.offset + lo + i] end
    return b
  end
  assert(ck:write("params/" .. view.name, view.shape, lo, part(params)))
  assert(ck:write("optim/m/" .. view.name, view.shape, lo, part(m)))
  assert(ck:write("optim/v/" .. view.name, view.shape, lo, part(v)))
end
assert(ck:set("step", steps))
assert(ck:set("data_position", data:position()))
assert(ck:set("optim_step", opt:step_count()))
assert(ck:set("model", model:config()))
assert(ck:commit())
if metrics then metrics:close() print("manual_loop: metrics in " .. out .. ".h5") end
