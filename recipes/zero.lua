-- The same model trained at ZeRO stages 0, 1, 2 and 3: memory per rank and
-- tokens/s of each run beside the planner's prediction for the same model,
-- layout and machine, in a table and a plot (RUN_DIR/zero.png).
-- Run: strata run -n 2 recipes/zero.lua        (any number of ranks; 1: no sharding)
--      strata run -n 4 recipes/zero.lua steps=20 out=runs/zero4
local strata = require "strata"

local steps = strata.option("steps", 40)
local out = strata.option("out", "runs/zero")
local rank, size = strata.world()
local model = {layers = 4, hidden = 128, heads = 4, seq = 64}
local batch = 4

local rows = {}
for zero = 0, 3 do
  local run = strata.experiment{
    name = "zero" .. zero,
    run_dir = out .. "/zero" .. zero,
    overwrite = true, -- a measurement: each run of this recipe starts its runs again
    model = model,
    parallel = {zero = zero},
    optim = {warmup = steps // 8},
    train = {steps = steps, batch = batch, eval_every = 0, eval_batches = 2, log_every = steps},
    checkpoint = {final = false},
    metrics = {plot = false},
  }
  if strata.mode == "plan" then goto continue end -- `strata plan` predicts each experiment instead
  local plan = strata.plan{
    model = {layers = model.layers, hidden = model.hidden, heads = model.heads, seq = model.seq, vocab = 256},
    parallel = {dp = size, zero = zero, microbatch = batch, global_batch = batch * size, precision = "fp32"},
    cluster = {base = "this-machine", gpus_per_node = size},
    params = "engine", -- the planner's parameters of strata's own GPT and engine
    print = false,
  }
  do
    -- the largest rank's peak (ranks hold shards of slightly different sizes)
    local peak = strata.floats(1)
    peak[1] = run.mem_peak
    strata.allreduce(peak, "max")
    rows[#rows + 1] = {zero = zero, mem = peak[1] / 2 ^ 20, plan_mem = plan.mem.total / 2 ^ 20,
                       tps = run.tokens_per_s, plan_tps = plan.tokens_per_s}
  end
  ::continue::
end

if rank == 0 and #rows == 4 then
  print(string.format("\nZeRO on %d rank%s: GPT layers=%d hidden=%d seq=%d, %d sequences per rank", size,
                      size > 1 and "s" or "", model.layers, model.hidden, model.seq, batch))
  print("stage   MiB/rank  planner   ratio   tokens/s   planner")
  local dat = assert(io.open(out .. "/zero.dat", "w"))
  for _, r in ipairs(rows) do
    print(string.format("%5d %10.2f %8.2f %7.3f %10.0f %9.0f", r.zero, r.mem, r.plan_mem, r.mem / r.plan_mem,
                        r.tps, r.plan_tps))
    dat:write(string.format("%d %.4f %.4f %.1f %.1f\n", r.zero, r.mem, r.plan_mem, r.tps, r.plan_tps))
  end
  dat:close()
  local gp = io.popen("gnuplot 2>&1", "w")
  if gp then
    gp:write(string.format([[
set terminal pngcairo size 900,400
set output '%s/zero.png'
set multiplot layout 1,2 title 'ZeRO stages on %d ranks: measured and planned'
set xlabel 'ZeRO stage'
set xtics 0,1,3
set key bottom left
set ylabel 'MiB per rank'
set yrange [0:*]
plot '%s/zero.dat' using 1:2 with linespoints title 'measured', '' using 1:3 with linespoints dt 2 title 'planner'
set ylabel 'tokens/s'
plot '%s/zero.dat' using 1:4 with linespoints title 'measured', '' using 1:5 with linespoints dt 2 title 'planner'
unset multiplot
]], out, size, out, out))
    local ok = gp:close()
    print(ok and ("plot in " .. out .. "/zero.png") or "gnuplot failed; the table is in " .. out .. "/zero.dat")
  end
end
