-- Colossal-AI's multi-dimensional tensor parallelism, measured: one GPT
-- layer (strata.tp_layer: layernorms, attention, MLP, forward and backward)
-- under Megatron's 1D, Optimus' 2D, Tesseract's 2.5D and the 3D layer of
-- Bian et al., at every tensor degree the ranks allow, its bytes per rank
-- per layer from libcomm's counters and its partners beside
--   strata's formula   what the layer sends as derived (par_plan_tp_layer_sent):
--                      the recipe fails if one byte differs
--   the papers'        the four products by the papers' formulas, the
--                      planner's accounting (docs/planner.md, colossal-tp)
-- and the formulas carried to 64 and 1000 processors (the papers' claim:
-- 999 partners for 1D against 9 along each of 3D's three axes, 27 in all,
-- at 1000; 2D at 1024 = 32^2, the square nearest). Table and plot of
-- bytes per rank against the tensor degree, per mode, in OUT/.
-- Run: strata run -n 8 recipes/reproduce/colossal-tp-measured.lua
--      strata run -n 8 recipes/reproduce/colossal-tp-measured.lua hidden=512 seq=128 out=runs/tp
--      strata plan recipes/reproduce/colossal-tp-measured.lua   (the formulas alone, to 1000 processors)
local strata = require "strata"

local shape = {
  batch = strata.option("batch", 8), seq = strata.option("seq", 64),
  hidden = strata.option("hidden", 256), heads = strata.option("heads", 8),
}
local out = strata.option("out", "runs/colossal-tp-measured")
local plot = strata.option("plot", true)
local rank, size = 0, 1
if strata.mode ~= "plan" then rank, size = strata.world() end

-- Each mode's layouts at a tensor degree: {q, d}, or nil where it has none.
local function root(n, k)
  local r = math.floor(n ^ (1 / k) + 0.5)
  return r ^ k == n and r or nil
end
local modes = {
  {name = "1d", grid = function(tp) return tp, 1 end, partners = function(tp) return tp - 1 end},
  {name = "2d", grid = function(tp) return root(tp, 2), 1 end, partners = function(q) return 2 * (q - 1) end},
  {name = "2.5d", grid = function(tp) -- q = d where tp is a cube (Tesseract's q x q x q), else d = 2
     local c = root(tp, 3)
     if c then return c, c end
     return tp % 2 == 0 and root(tp // 2, 2) or nil, 2
   end,
   partners = function(q, d) return 2 * (q - 1) + d - 1 end},
  {name = "3d", grid = function(tp) return root(tp, 3), 1 end, partners = function(q) return 3 * (q - 1) end},
}

local function say(...) if rank == 0 then print(string.format(...)) end end
local function args(mode, tp, d, run) return {mode = mode, tp = tp, depth = d, run = run, batch = shape.batch,
  seq = shape.seq, hidden = shape.hidden, heads = shape.heads} end

-- Measured, on groups of tp ranks (tp dividing the world, > 1).
local measured = {}
if strata.mode ~= "plan" then
  say("One layer: %d sequences of %d tokens, hidden %d, %d heads, fp32; %d ranks", shape.batch, shape.seq,
      shape.hidden, shape.heads, size)
  say("%-5s %4s %7s %14s %14s %14s %9s %8s %10s", "mode", "tp", "q x d", "bytes/rank", "strata formula",
      "papers' terms", "partners", "ms", "MiB/rank")
  for tp = 2, size do
    if size % tp == 0 then
      for _, m in ipairs(modes) do
        local q, d = m.grid(tp)
        if q and q > 1 then
          local r, err = strata.tp_layer(args(m.name, tp, d))
          if not r then error(string.format("%s at tp = %d: %s", m.name, tp, err), 0) end
          local want = m.partners(q, d)
          say("%-5s %4d %7s %14.0f %14.0f %14.0f %4d (%d) %8.1f %10.2f", m.name, tp, q .. " x " .. d, r.sent,
              r.formula, r.papers, r.partners, want, 1e3 * r.seconds, r.memory / 2 ^ 20)
          if math.abs(r.sent - r.formula) > 0.5 or r.partners ~= want then
            error(string.format("%s at tp = %d: %.0f bytes and %d partners measured, the formula's %.0f and %d",
                                m.name, tp, r.sent, r.partners, r.formula, want), 0)
          end
          measured[#measured + 1] = {mode = m.name, tp = tp, bytes = r.sent}
        end
      end
    end
  end
  if #measured == 0 then say("(one rank: nothing to measure; run with strata run -n 8)") end
end

-- The formulas carried to larger degrees.
say("\nThe formulas at the same shape (bytes per rank per layer; partners):")
say("%-5s %6s %10s %14s %14s %9s", "mode", "tp", "q x d", "strata formula", "papers' terms", "partners")
local curves = {}
for _, m in ipairs(modes) do
  curves[m.name] = {}
  for _, tp in ipairs{2, 4, 8, 16, 64, 256, 1000, 1024} do
    local q, d = m.grid(tp)
    if q and q > 1 then
      local f = strata.tp_layer(args(m.name, tp, d, false))
      curves[m.name][#curves[m.name] + 1] = {tp = tp, bytes = f.formula, papers = f.papers}
      if tp == 64 or tp == 1000 or (tp == 1024 and m.name ~= "1d") then
        say("%-5s %6d %10s %14.0f %14.0f %9d", m.name, tp, q .. " x " .. d, f.formula, f.papers, m.partners(q, d))
      end
    end
  end
end

if strata.mode == "plan" then -- the papers' per-layer terms and partners beside the planner's
  local worst = 0
  for _, row in ipairs(strata.reproduce("colossal-tp")) do worst = math.max(worst, math.abs(row.rel_err)) end
  print(string.format("colossal-tp-measured (Colossal-AI's formulas): largest relative error %.1f%%", 100 * worst))
end

if rank == 0 and plot and strata.mode ~= "plan" then
  os.execute("mkdir -p '" .. out .. "'")
  for name, pts in pairs(curves) do
    local f = assert(io.open(string.format("%s/formula-%s.dat", out, name), "w"))
    for _, p in ipairs(pts) do f:write(string.format("%d %.0f %.0f\n", p.tp, p.bytes, p.papers)) end
    f:close()
    f = assert(io.open(string.format("%s/measured-%s.dat", out, name), "w"))
    for _, p in ipairs(measured) do
      if p.mode == name then f:write(string.format("%d %.0f\n", p.tp, p.bytes)) end
    end
    f:close()
  end
  local gp = io.popen("gnuplot 2>&1", "w")
  if gp then
    local series = {}
    for i, m in ipairs(modes) do
      series[#series + 1] = string.format("'%s/formula-%s.dat' using 1:2 with lines lc %d title '%s formula'", out,
                                          m.name, i, m.name)
      series[#series + 1] = string.format("'%s/measured-%s.dat' using 1:2 with points pt 7 ps 1.5 lc %d title '%s measured'",
                                          out, m.name, i, m.name)
    end
    gp:write(string.format([[
set terminal pngcairo size 900,560
set output '%s/colossal-tp-measured.png'
set title 'One GPT layer (hidden %d, %d x %d tokens): bytes each rank sends, forward + backward'
set logscale xy
set xlabel 'tensor-parallel degree (ranks)'
set ylabel 'bytes per rank per layer'
set key outside right
plot %s
]], out, shape.hidden, shape.batch, shape.seq, table.concat(series, ", ")))
    local ok = gp:close()
    print(ok and ("plot in " .. out .. "/colossal-tp-measured.png") or "gnuplot failed; the tables are in " .. out)
  end
end
