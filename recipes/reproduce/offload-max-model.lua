-- PatrickStar (arXiv 2108.05818) against ZeRO-Offload on this machine: with
-- the same small device (64 MiB: on the CPU a cap on the device's bytes,
-- standing in for a GPU) and host tier (256 MiB), the largest GPT each
-- offload policy trains, found by bisection over the layers (a model counts
-- as trainable when its steps run), and its tokens/s; table and plot in
-- OUT/offload-max-model.{dat,png}. PatrickStar's claim: 1.5x the static
-- policy's largest model on the same hardware. `make bench` prints the
-- same comparison (BENCH offload.maxmodel).
--   static  ZeRO-Offload: bf16 parameters and gradients on the device, fp32
--           masters and Adam's moments in the host tier, the update on the CPU
--   chunks  PatrickStar: everything in chunks that come to the device as the
--           passes need them and go to the host for the CPU update
-- Run: strata run recipes/reproduce/offload-max-model.lua
--      strata run recipes/reproduce/offload-max-model.lua device_mb=128 host_mb=512 out=runs/maxmodel
--      strata plan recipes/reproduce/offload-max-model.lua   (the published figures beside the planner's)
local strata = require "strata"

if strata.mode == "plan" then -- the paper's scale: 8 x V100 32 GB with 240 GB of CPU memory
  local worst = 0
  for _, row in ipairs(strata.reproduce("patrickstar")) do
    worst = math.max(worst, math.abs(row.rel_err))
  end
  print(string.format("offload-max-model (PatrickStar's figures): largest relative error %.1f%%", 100 * worst))
  return
end

local device_mb = strata.option("device_mb", 64)
local host_mb = strata.option("host_mb", 256)
local hidden = strata.option("hidden", 256)
local steps = strata.option("steps", 3)
local out = strata.option("out", "runs/offload-max-model")
local rank, size = strata.world()
assert(size == 1, "offload-max-model runs on one rank (it compares one device's budget)")

-- One attempt: the run's summary, or nil and the reason it failed.
local function try(policy, layers)
  local ok, run = pcall(strata.experiment, {
    name = string.format("%s-%d", policy, layers),
    run_dir = string.format("%s/%s-%d", out, policy, layers),
    overwrite = true, -- a measurement (and a refusal here would read as "does not fit")
    model = {layers = layers, hidden = hidden, heads = 4, seq = 64, recompute = true},
    parallel = {precision = "bf16"},
    offload = {policy = policy, device_mb = device_mb, host_mb = host_mb},
    optim = {warmup = 0},
    train = {steps = steps, batch = 4, eval_every = 0, eval_batches = 1, log_every = steps},
    checkpoint = {final = false},
    metrics = {plot = false},
  })
  if ok then return run end
  return nil, type(run) == "table" and run.message or tostring(run)
end

local rows = {}
for _, policy in ipairs{"static", "chunks"} do
  local lo, hi, best, why = 0, 129, nil, nil
  while hi - lo > 1 do
    local mid = (lo + hi) // 2
    local run, err = try(policy, mid)
    if run then lo, best = mid, run else hi, why = mid, err end
    print(string.format("%s: %d layers %s", policy, mid, run and "train" or ("do not fit: " .. err)))
  end
  if best then
    rows[#rows + 1] = {policy = policy, layers = lo, params = best.params, tps = best.tokens_per_s,
                       device = best.device_peak / 2 ^ 20, why = why}
  end
end

if #rows == 2 then
  print(string.format("\nLargest bf16 GPT (hidden %d, 4 heads, T = 64, recompute, 4 sequences a step, AdamW) "
                      .. "with a device of %g MiB and a host tier of %g MiB:", hidden, device_mb, host_mb))
  print("policy   layers   parameters   tokens/s   device peak MiB   the next size up")
  local dat = assert(io.open(out .. "/offload-max-model.dat", "w"))
  for i, r in ipairs(rows) do
    print(string.format("%-7s %7d %12.2fM %10.0f %17.1f   %s", r.policy, r.layers, r.params / 1e6, r.tps, r.device,
                        r.why or ""))
    dat:write(string.format("%d \"%s\" %d %.0f %.1f %.2f\n", i - 1, r.policy, r.layers, r.params, r.tps, r.device))
  end
  dat:close()
  print(string.format("chunks / static: %.2fx the parameters (PatrickStar's claim: 1.5x)", rows[2].params / rows[1].params))
  local gp = io.popen("gnuplot 2>&1", "w")
  if gp then
    gp:write(string.format([[
set terminal pngcairo size 900,400
set output '%s/offload-max-model.png'
set multiplot layout 1,2 title 'Largest GPT with a %g MiB device and a %g MiB host tier'
set style fill solid 0.6
set boxwidth 0.6
set xrange [-0.6:1.6]
set yrange [0:*]
set ylabel 'parameters (millions)'
plot '%s/offload-max-model.dat' using 1:($4/1e6):xtic(2) with boxes notitle
set ylabel 'tokens/s at that size'
plot '%s/offload-max-model.dat' using 1:5:xtic(2) with boxes notitle
unset multiplot
]], out, device_mb, host_mb, out, out))
    local ok = gp:close()
    print(ok and ("plot in " .. out .. "/offload-max-model.png")
          or "gnuplot failed; the table is in " .. out .. "/offload-max-model.dat")
  end
end
