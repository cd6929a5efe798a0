-- The same model trained under every tensor x pipeline x data-parallel
-- layout of the ranks (Megatron's tensor parallelism inside groups of
-- consecutive ranks, data parallelism and ZeRO across them, 1F1B pipeline
-- stages outermost): memory per rank and tokens/s of each run beside the
-- planner's prediction for the same model, layout and machine, in a table
-- (RUN_DIR/layouts.dat). Every layout takes the same global batch (batch x
-- ranks sequences a step, in microbatches of batch). The planner's GEMM
-- efficiency is fitted on the first run (plain data parallelism), whose
-- ranks share the machine's cores as every later run's do; the other
-- layouts' times are then predictions.
-- Run: strata run -n 4 recipes/layouts.lua          (tp and pp 1, 2, 4; ZeRO 0 and 1 where dp > 1)
--      strata run -n 2 recipes/layouts.lua steps=10 out=runs/layouts2
local strata = require "strata"

local steps = strata.option("steps", 30)
local out = strata.option("out", "runs/layouts")
local rank, size = strata.world()
local model = {layers = 4, hidden = 128, heads = 4, seq = 64}
local batch = 4

local rows = {}
for pp = 1, size do
  for tp = 1, size // pp do
    local dp = size // (tp * pp)
    if tp * pp * dp == size and model.heads % tp == 0 and model.layers % pp == 0 then
      for _, zero in ipairs(dp > 1 and {0, 1} or {0}) do
        local name = string.format("tp%d_pp%d_dp%d_zero%d", tp, pp, dp, zero)
        local run = strata.experiment{
          name = name,
          run_dir = out .. "/" .. name,
          overwrite = true, -- a measurement: each run of this recipe starts its runs again
          model = model,
          parallel = {tp = tp, pp = pp, zero = zero},
          optim = {warmup = steps // 8},
          train = {steps = steps, batch = batch, accum = size // dp, eval_every = 0, eval_batches = 2,
                   log_every = steps},
          checkpoint = {final = false},
          metrics = {plot = false},
        }
        if strata.mode ~= "plan" then -- `strata plan` predicts each experiment instead
          local peak = strata.floats(1) -- the largest rank's peak
          peak[1] = run.mem_peak
          strata.allreduce(peak, "max")
          rows[#rows + 1] = {tp = tp, pp = pp, dp = dp, zero = zero, mem = peak[1] / 2 ^ 20, tps = run.tokens_per_s}
        end
      end
    end
  end
end

local function plan(r, params)
  return strata.plan{
    model = {layers = model.layers, hidden = model.hidden, heads = model.heads, seq = model.seq, vocab = 256},
    parallel = {tp = r.tp, pp = r.pp, dp = r.dp, zero = r.zero, microbatch = batch, global_batch = batch * size,
                schedule = "1f1b", precision = "fp32"},
    cluster = {base = "this-machine", gpus_per_node = size},
    params = params, -- strata's own GPT and engine
    print = false,
  }
end

if rank == 0 and #rows > 0 then
  local params = {base = "engine", gemm_efficiency = 0.5}
  for _ = 1, 30 do -- fit on the first run
    local p = plan(rows[1], params)
    params.gemm_efficiency = math.min(1, params.gemm_efficiency * rows[1].tps / p.tokens_per_s)
  end
  print(string.format("\nLayouts of %d rank%s: GPT layers=%d hidden=%d heads=%d seq=%d, %d sequences a step in microbatches of %d",
                      size, size > 1 and "s" or "", model.layers, model.hidden, model.heads, model.seq, batch * size, batch))
  print(string.format("planner: strata's engine, gemm_efficiency %.3f fitted on the first run", params.gemm_efficiency))
  print("  tp   pp   dp  zero   MiB/rank  planner   ratio   tokens/s   planner   ratio")
  local dat = assert(io.open(out .. "/layouts.dat", "w"))
  for _, r in ipairs(rows) do
    local p = plan(r, params)
    local pm, pt = p.mem.total / 2 ^ 20, p.tokens_per_s
    print(string.format("%4d %4d %4d %5d %10.2f %8.2f %7.3f %10.0f %9.0f %7.3f", r.tp, r.pp, r.dp, r.zero, r.mem, pm,
                        r.mem / pm, r.tps, pt, r.tps / pt))
    dat:write(string.format("%d %d %d %d %.4f %.4f %.1f %.1f\n", r.tp, r.pp, r.dp, r.zero, r.mem, pm, r.tps, pt))
  end
  dat:close()
  print("table in " .. out .. "/layouts.dat")
end
