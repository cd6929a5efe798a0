-- large-batch: the same GPT and the same token budget trained at global
-- batches from small to 256x larger, with SGD+momentum, AdamW, LARS and
-- LAMB, each with its published learning-rate rule for a larger batch:
-- linear for SGD and LARS (Goyal et al., arXiv 1706.02677; You et al.,
-- arXiv 1708.03888), square root for AdamW and LAMB (You et al., arXiv
-- 1904.00962 sec. 4), and a linear learning-rate warm-up. On the Markov
-- corpus every result is a gap to the best possible loss (the source's
-- entropy rate); on the text corpus (strata's own C sources) a gap to the
-- best validation loss any run reached.
--
-- Colossal-AI's claim (after You et al.): LAMB and LARS keep the accuracy
-- from batch 512 to 65536. The question at this scale: at a fixed token
-- budget, how does the final gap grow with the batch, and how many steps
-- does each batch need to reach a target gap (perfect scaling: steps
-- proportional to 1 / batch, a line of slope -1; McCandlish et al., arXiv
-- 1812.06162, S = S_min (1 + B_crit / B), fitted here)?
--
--   strata run recipes/reproduce/large-batch.lua                   # default: minutes on 2 cores
--   strata run recipes/reproduce/large-batch.lua batches=4,64,1024 sequences=65536 hidden=128 layers=2
--   strata run recipes/reproduce/large-batch.lua corpora=markov optims=lamb,lars batch_warmup=0.2
--
-- Output under out= (default runs/large-batch): large-batch.h5 (every run's
-- evaluations, summaries and trust-ratio statistics in one metrics file),
-- table.md, gap.png (a), steps.png (b), trust.png (c), and each run's own
-- metrics under runs/.
local strata = require "strata"
local opt = strata.option

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local root = here .. "/../.."

local function list(s, num)
  local r = {}
  for x in tostring(s):gmatch("[^,]+") do r[#r + 1] = num and math.tointeger(tonumber(x)) or x end
  return r
end

local out = opt("out", "runs/large-batch")
local batches = list(opt("batches", "2,8,32,128,512"), true)
local optims = list(opt("optims", "momentum,adamw,lars,lamb"))
local corpora = list(opt("corpora", "markov,text"))
local sequences = opt("sequences", 8192)     -- training sequences per run: the token budget / seq
local micro = opt("micro", 16)               -- sequences per microbatch at most (accumulation beyond)
local evals = opt("evals", 16)               -- evaluations per run
local eval_batches = opt("eval_batches", 8)
local lr_batch = opt("lr_batch", 8)          -- the batch at which the base rates below hold
local warmup = opt("warmup", 0.1)            -- learning-rate warm-up, share of the steps
local batch_warmup = opt("batch_warmup", 0.0) -- batch warm-up, share of the steps (0: none)
local target = opt("target_gap", 0.0)        -- 0: 1.5 x the best final gap at the smallest batch, + 0.05
local model = {layers = opt("layers", 1), hidden = opt("hidden", 32), heads = opt("heads", 2), seq = opt("seq", 32)}
local text_path = opt("text_path", root .. "/lib*/src/*.c")
local markov_tokens = opt("markov_tokens", 1 << 20)

-- Base learning rates at lr_batch sequences, and each optimizer's rule.
local setups = {
  momentum = {rule = "linear", lr = opt("lr_momentum", 0.1), momentum = 0.9},
  adamw = {rule = "sqrt", lr = opt("lr_adamw", 0.02), weight_decay = 0.01},
  lars = {rule = "linear", lr = opt("lr_lars", 5.0), momentum = 0.9, weight_decay = 1e-4},
  lamb = {rule = "sqrt", lr = opt("lr_lamb", 0.02), weight_decay = 0.01},
}
for _, o in ipairs(optims) do
  if not setups[o] then error(string.format("optims: unknown optimizer '%s' (momentum, adamw, lars, lamb)", o), 0) end
end
table.sort(batches)

-- Plan mode (strata plan): the runs this would train, and the square-root
-- rule against the learning rates You et al. published for LAMB on BERT
-- (arXiv 1904.00962, Table 4: 5 / (2^3 10^3) at batch 512 up to 5 / 10^3 at 32768).
if strata.mode == "plan" then
  for _, B in ipairs(batches) do
    local mb = math.min(B, micro)
    while B % mb ~= 0 do mb = mb - 1 end
    print(string.format("large-batch: batch %5d: %6d steps of %d microbatches of %d", B, math.max(1, sequences // B), B // mb, mb))
  end
  local worst = 0
  for k = 0, 6 do
    local B, published = 512 * 2 ^ k, 5 / (2 ^ (3 - k / 2) * 1e3)
    local rule = 5 / (2 ^ 3 * 1e3) * math.sqrt(B / 512)
    worst = math.max(worst, math.abs(rule - published) / published)
  end
  print(string.format("large-batch (LAMB's square-root rule against You et al.'s Table 4): largest relative error %.1f%%", 100 * worst))
  return
end

local rank = strata.world()
os.execute("mkdir -p '" .. out .. "/runs'")

-- ------------------------------------------------------------ the runs

local results = {} -- [corpus][optim][batch] = {final=, evals={{step, val}}, trust={[layer]={min,sum,n,max}}, ...}
local entropy = {}
for _, corpus in ipairs(corpora) do
  results[corpus] = {}
  for _, oname in ipairs(optims) do
    results[corpus][oname] = {}
    local s = setups[oname]
    for _, B in ipairs(batches) do
      local steps = math.max(1, sequences // B)
      local mb = math.min(B, micro)
      while B % mb ~= 0 do mb = mb - 1 end
      local name = string.format("%s-%s-b%d", corpus, oname, B)
      local dir = out .. "/runs/" .. name
      local data = corpus == "markov" and {source = "markov", tokens = markov_tokens, val_fraction = 0.05}
                   or {source = "text", path = text_path, val_fraction = 0.1}
      local train = {steps = steps, batch = mb, global_batch = B, eval_every = math.max(1, steps // evals),
                     eval_batches = eval_batches, log_every = steps, diverge_factor = 3}
      local bw = math.floor(batch_warmup * steps)
      if bw >= 1 and B > mb and bw < steps then
        train.batch_start, train.batch_warmup = mb, bw
      end
      local w = math.floor(warmup * steps)
      local ok, r = pcall(strata.experiment, {
        name = name, run_dir = dir,
        model = model, data = data,
        optim = {name = oname, lr = s.lr, min_lr = s.lr / 10, schedule = "cosine",
                 warmup = w < steps and w or 0, weight_decay = s.weight_decay, momentum = s.momentum,
                 lr_scaling = s.rule, lr_batch = lr_batch},
        train = train,
        checkpoint = {final = false},
        metrics = {plot = false},
      })
      if not ok and not (type(r) == "table" and r.status == 1) then error(r, 0) end -- a recipe error stops all
      local res = {batch = B, steps = steps, diverged = not ok, dir = dir,
                   lr = s.lr * (s.rule == "linear" and B / lr_batch or math.sqrt(B / lr_batch))}
      if not ok and rank == 0 then print("strata: large-batch: " .. name .. " diverged: " .. tostring(r.message)) end
      local m = dir .. "/metrics.h5"
      local st = strata.metrics.read(m, "step") or {}
      local val = strata.metrics.read(m, "val_loss") or {}
      res.evals = {}
      for i = 1, #st do
        if val[i] == val[i] then res.evals[#res.evals + 1] = {st[i], val[i]} end
      end
      res.final = ok and r.val_loss or 0 / 0
      if ok and r.entropy_rate then entropy[corpus] = r.entropy_rate end
      -- trust ratios per layer: 0 the embeddings, l + 1 block l; min, mean, max over steps and views
      res.trust = {}
      for _, n in ipairs(strata.metrics.names(m) or {}) do
        local blk = n:match("^trust%.h%.(%d+)%.")
        local layer = blk and tonumber(blk) + 1 or (n:match("^trust%.") and 0)
        if layer then
          local t = res.trust[layer] or {min = math.huge, max = -math.huge, sum = 0, n = 0}
          for _, x in ipairs(strata.metrics.read(m, n)) do
            if x == x then
              t.min, t.max, t.sum, t.n = math.min(t.min, x), math.max(t.max, x), t.sum + x, t.n + 1
            end
          end
          res.trust[layer] = t
        end
      end
      results[corpus][oname][B] = res
    end
  end
end

-- ------------------------------------------------------------ analysis

-- The reference of each corpus: its entropy rate (Markov), else the best
-- validation loss of any run.
local best = {}
for _, corpus in ipairs(corpora) do
  local b = math.huge
  for _, oname in ipairs(optims) do
    for _, B in ipairs(batches) do
      for _, e in ipairs(results[corpus][oname][B].evals) do b = math.min(b, e[2]) end
    end
  end
  best[corpus] = entropy[corpus] or b
end

local targets = {}
for _, corpus in ipairs(corpora) do
  local t = target
  if t <= 0 then -- reachable at the smallest batch by the best optimizer there, with room for others
    local g0 = math.huge
    for _, oname in ipairs(optims) do
      local g = results[corpus][oname][batches[1]].final - best[corpus]
      if g == g then g0 = math.min(g0, g) end
    end
    t = g0 < math.huge and 1.5 * g0 + 0.05 or 0
  end
  targets[corpus] = t
end

-- Steps to the target: the first evaluation at or below it.
local function steps_to(r, corpus)
  for _, e in ipairs(r.evals) do
    if e[2] - best[corpus] <= targets[corpus] + 1e-12 then return e[1] end
  end
end

-- McCandlish et al.: S = S_min + S_min B_crit / B, least squares of S on 1/B
-- over the batches that reached the target (two at least).
local function critical(corpus, oname)
  local xs, ys = {}, {}
  for _, B in ipairs(batches) do
    local s = steps_to(results[corpus][oname][B], corpus)
    if s then xs[#xs + 1], ys[#ys + 1] = 1 / B, s end
  end
  if #xs < 2 then return nil end
  local n, sx, sy, sxx, sxy = #xs, 0, 0, 0, 0
  for i = 1, n do sx, sy, sxx, sxy = sx + xs[i], sy + ys[i], sxx + xs[i] ^ 2, sxy + xs[i] * ys[i] end
  local den = n * sxx - sx * sx
  if den == 0 then return nil end
  local b = (n * sxy - sx * sy) / den
  local a = (sy - b * sx) / n
  if a <= 0 then return nil, a, b end
  return b / a, a, b
end

-- ------------------------------------------------------------ outputs (rank 0)

if rank ~= 0 then return end

local h5 = out .. "/large-batch.h5"
os.remove(h5)
local cols = {"kind", "corpus", "optimizer", "batch", "step", "tokens", "val_loss", "gap", "lr",
              "steps_to_target", "target_gap", "layer", "trust_min", "trust_mean", "trust_max", "diverged"}
local mf = assert(strata.metrics.create(h5, cols))
mf:attr("kinds", "1: an evaluation of a run; 2: a run's summary (its last evaluation); 3: trust-ratio statistics of one layer of a LAMB/LARS run (layer 0: the embeddings, l + 1: block l)")
mf:attr("corpora", table.concat(corpora, ","))
mf:attr("optimizers", table.concat(optims, ","))
mf:attr("reference", "gap = val_loss - the Markov source's entropy rate, or on text the best val_loss of any run")
mf:attr("model", string.format("layers=%d hidden=%d heads=%d seq=%d", model.layers, model.hidden, model.heads, model.seq))
mf:attr("budget", string.format("%d sequences of %d tokens per run", sequences, model.seq))
for ci, corpus in ipairs(corpora) do
  mf:attr("reference_" .. corpus, string.format("%.10g", best[corpus]))
  for oi, oname in ipairs(optims) do
    for _, B in ipairs(batches) do
      local r = results[corpus][oname][B]
      for _, e in ipairs(r.evals) do
        mf:append{kind = 1, corpus = ci - 1, optimizer = oi - 1, batch = B, step = e[1], tokens = e[1] * B * model.seq,
                  val_loss = e[2], gap = e[2] - best[corpus], lr = r.lr}
      end
      mf:append{kind = 2, corpus = ci - 1, optimizer = oi - 1, batch = B, step = r.steps,
                tokens = r.steps * B * model.seq, val_loss = r.final, gap = r.final - best[corpus], lr = r.lr,
                steps_to_target = steps_to(r, corpus) or 0 / 0, target_gap = targets[corpus],
                diverged = r.diverged and 1 or 0}
      for layer, t in pairs(r.trust) do
        if t.n > 0 then
          mf:append{kind = 3, corpus = ci - 1, optimizer = oi - 1, batch = B, layer = layer, trust_min = t.min,
                    trust_mean = t.sum / t.n, trust_max = t.max}
        end
      end
    end
  end
end

-- The table (markdown).
local lines = {}
local function add(s) lines[#lines + 1] = s end
add(string.format("Model %s; %d sequences of %d tokens per run; learning rates given at batch %d; warm-up %g of the steps%s.",
                  string.format("layers=%d hidden=%d heads=%d", model.layers, model.hidden, model.heads), sequences,
                  model.seq, lr_batch, warmup, batch_warmup > 0 and string.format(", batch warm-up %g", batch_warmup) or ""))
add("")
for _, corpus in ipairs(corpora) do
  add(string.format("**%s** (reference %s %.4f nats/token; target gap %.4f)", corpus,
                    entropy[corpus] and "entropy rate" or "best validation loss", best[corpus], targets[corpus]))
  add("")
  local head, rule = {"| optimizer (rule) |"}, {"|---|"}
  for _, B in ipairs(batches) do head[#head + 1] = string.format(" B=%d |", B); rule[#rule + 1] = "---|" end
  head[#head + 1] = " B_crit (fit) |"; rule[#rule + 1] = "---|"
  add(table.concat(head)); add(table.concat(rule))
  for _, oname in ipairs(optims) do
    local row = {string.format("| %s (%s) |", oname, setups[oname].rule)}
    for _, B in ipairs(batches) do
      local r = results[corpus][oname][B]
      local s = steps_to(r, corpus)
      row[#row + 1] = r.diverged and " diverged |" or
                      string.format(" %.3f / %s |", r.final - best[corpus], s and string.format("%d", s) or "-")
    end
    local bc, a = critical(corpus, oname)
    row[#row + 1] = bc and string.format(" %.0f (S_min %.0f) |", bc, a) or " - |"
    add(table.concat(row))
  end
  add("")
end
add("Cells: final validation gap (nats/token) / steps to the target gap (- : not reached within the budget); steps per run = budget / B.")
local tf = assert(io.open(out .. "/table.md", "w"))
tf:write(table.concat(lines, "\n"), "\n")
tf:close()
mf:attr("table", table.concat(lines, "\n"))
mf:close()
print(table.concat(lines, "\n"))

-- ------------------------------------------------------------ plots

local function gnuplot(script)
  local gp = io.popen("gnuplot 2>&1", "w")
  if not gp then print("strata: large-batch: gnuplot not found; no plots") return end
  gp:write(script)
  gp:close()
end
local function datafile(name, rows)
  local f = assert(io.open(out .. "/" .. name, "w"))
  for _, r in ipairs(rows) do f:write(table.concat(r, " "), "\n") end
  f:close()
  return out .. "/" .. name
end

local function panels(file, title, ylabel, fn, extra, logy)
  local s = {string.format("set terminal pngcairo size %d,420\nset output '%s'\nset multiplot layout 1,%d title '%s'\n",
                           460 * #corpora, out .. "/" .. file, #corpora, title)}
  for _, corpus in ipairs(corpora) do
    s[#s + 1] = string.format("set title '%s'\nset logscale x 2\nset xrange [%g:%g]\n%sset xlabel 'global batch (sequences)'\nset ylabel '%s'\nset key top right\n",
                              corpus, batches[1] / 1.5, batches[#batches] * 1.5, logy and "set logscale y\n" or "", ylabel)
    local plots = {}
    for _, oname in ipairs(optims) do
      local rows = fn(corpus, oname)
      if #rows > 0 then
        local df = datafile(string.format("%s-%s-%s.dat", file:gsub("%.png$", ""), corpus, oname), rows)
        plots[#plots + 1] = string.format("'%s' using 1:2 with linespoints title '%s (%s)'", df, oname, setups[oname].rule)
      end
    end
    if extra then plots[#plots + 1] = extra(corpus) end
    if #plots == 0 then plots[1] = "NaN notitle" end
    s[#s + 1] = "plot " .. table.concat(plots, ", ") .. "\nunset logscale\n"
  end
  s[#s + 1] = "unset multiplot\n"
  gnuplot(table.concat(s))
end

panels("gap.png", "(a) final validation gap at a fixed token budget", "gap (nats/token)", function(corpus, oname)
  local rows = {}
  for _, B in ipairs(batches) do
    local r = results[corpus][oname][B]
    if not r.diverged then rows[#rows + 1] = {B, r.final - best[corpus]} end
  end
  return rows
end)

panels("steps.png", "(b) steps to the target gap (perfect scaling: slope -1)", "steps", function(corpus, oname)
  local rows = {}
  for _, B in ipairs(batches) do
    local s = steps_to(results[corpus][oname][B], corpus)
    if s then rows[#rows + 1] = {B, s} end
  end
  return rows
end, function(corpus) -- perfect scaling through the fastest run at the smallest batch, and the budget
  local s0
  for _, oname in ipairs(optims) do
    local s = steps_to(results[corpus][oname][batches[1]], corpus)
    if s and (not s0 or s < s0) then s0 = s end
  end
  local budget = string.format("%d / x with lines dashtype 3 lc 'black' title 'budget (steps = %d / B)'", sequences, sequences)
  if not s0 then return budget end
  return string.format("%g / x with lines dashtype 2 lc 'gray' title 'slope -1', ", s0 * batches[1]) .. budget
end, true)

-- (c) trust ratios: mean per layer (min-max bars) against the batch, LAMB and LARS
local tr = {}
for _, corpus in ipairs(corpora) do
  for _, oname in ipairs(optims) do
    if oname == "lamb" or oname == "lars" then
      local layers = {}
      for _, B in ipairs(batches) do
        for layer, t in pairs(results[corpus][oname][B].trust) do
          if t.n > 0 then
            layers[layer] = layers[layer] or {}
            table.insert(layers[layer], {B, t.sum / t.n, t.min, t.max})
          end
        end
      end
      for layer, rows in pairs(layers) do
        local df = datafile(string.format("trust-%s-%s-%d.dat", corpus, oname, layer), rows)
        tr[#tr + 1] = string.format("'%s' using 1:2:3:4 with yerrorlines title '%s %s %s'", df, corpus, oname,
                                    layer == 0 and "embeddings" or "block " .. (layer - 1))
      end
    end
  end
end
if #tr > 0 then
  table.sort(tr)
  gnuplot(string.format("set terminal pngcairo size 900,480\nset output '%s'\nset title '(c) trust ratios per layer (mean over steps and matrices; bars: min-max)'\n" ..
                        "set logscale xy\nset xlabel 'global batch (sequences)'\nset ylabel 'trust ratio'\nset key outside right\nplot %s\n",
                        out .. "/trust.png", table.concat(tr, ", ")))
end
print(string.format("strata: large-batch: %s, %s, plots %s/gap.png, steps.png%s", h5, out .. "/table.md", out,
                    #tr > 0 and ", trust.png" or ""))
