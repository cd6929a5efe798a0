-- strata.experiment{...}: validate the recipe (schema.lua), apply the
-- command line, prepare the run (ranks, data) and hand it to the training
-- loop. Also strata.option for recipes that write their own loop.
local M = ...

local function raise(where, path, value, why)
  M.schema_error(where, path, value, why)
end

local function parsed_overrides()
  if not M._parsed then
    M._parsed = {}
    for _, a in ipairs(M.overrides or {}) do M._parsed[#M._parsed + 1] = M.parse_override(a) end
  end
  return M._parsed
end

-- A run failure (not a recipe error): one line, exit status 1.
local function fail(msg)
  error({message = msg, status = 1, same_on_all_ranks = true}, 0)
end
M.fail = fail

-- strata.option("train.steps", 100): the command-line value of a dotted
-- path, else the default; for recipes that write their own loop, or settings
-- of a recipe's own (read before strata.experiment, they are not recipe keys).
function M.option(path, default)
  for _, o in ipairs(parsed_overrides()) do
    if o.path == path then
      o.used = true
      if default ~= nil and type(o.value) ~= type(default) then
        raise("command line", path, o.value, "expected a " .. type(default))
      end
      return o.value
    end
  end
  return default
end

-- Called by the executable after the recipe returns: an override that
-- nothing read is an error, not a silent no-op.
function M.check_overrides_used()
  if M._experiment_called then return end
  for _, o in ipairs(parsed_overrides()) do
    if not o.used then
      raise("command line", o.path, o.value,
            "not used: this recipe calls no strata.experiment and never asked for it with strata.option" ..
            (M.mode == "plan" and " (strata.plan and strata.plan_search take their settings from the recipe alone)" or ""))
    end
  end
end

function M.experiment(recipe)
  if type(recipe) ~= "table" then
    local info = debug.getinfo(2, "Sl")
    raise(string.format("%s:%d", (info.source or "?"):gsub("^@", ""), info.currentline or 0),
          "experiment", recipe, "expected a table: strata.experiment{ model = {...}, ... }")
  end
  local info = debug.getinfo(2, "Sl")
  local where = {line = info.currentline}
  if info.source and info.source:sub(1, 1) == "@" then where.source = info.source:sub(2) end
  M._experiment_called = true
  -- the command line's settings, less those the recipe read with strata.option
  local overrides = {}
  for _, o in ipairs(parsed_overrides()) do
    if not o.used then overrides[#overrides + 1] = o end
  end
  local cfg = M.validate(recipe, where, overrides)
  if M.mode == "plan" then return M.plan_experiment(cfg) end
  return M.prepare_and_train(cfg)
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- The files of an earlier run that a fresh run would write over: its
-- checkpoint, metrics and plot. Unless told to overwrite them or to
-- resume, the run refuses to start (exit status 2) with one line naming
-- them and the two ways on, before anything is read or written. Every rank
-- looks (the checkpoint is written collectively, so the ranks share its
-- file system); each says the same.
local function refuse_earlier_run(cfg)
  local dir = cfg.run_dir:gsub("/+$", "")
  local function name(path) -- as found under run_dir, else the whole path
    return path:sub(1, #dir + 1) == dir .. "/" and path:sub(#dir + 2) or path
  end
  local found, all_inside = {}, true
  local function add(path, detail)
    found[#found + 1] = name(path) .. (detail or "")
    all_inside = all_inside and name(path) ~= path
  end
  local ck, mp, plot = cfg.checkpoint.path, cfg.metrics.path, cfg.metrics.plot
  local has_ckpt = exists(ck)
  if has_ckpt then
    local c, step = M.checkpoint.open(ck), nil -- collective: every rank sees the same file
    if c then step = c:get_integers("step", 1) c:close() end
    add(ck, step and string.format(" (step %d)", step[1]))
  end
  if exists(mp) then
    local steps = M.metrics.read(mp, "step")
    local last = steps and steps[#steps] and math.tointeger(steps[#steps])
    add(mp, last and string.format(" (to step %d)", last))
  end
  if plot and exists(plot) then add(plot) end
  if #found == 0 then return end
  local what = all_inside and string.format("%s holds an earlier run: %s", dir, table.concat(found, ", "))
               or string.format("an earlier run's files are in the way: %s", table.concat(found, ", "))
  local ways = has_ckpt and "resume it with train.resume=true, or start again over it with overwrite=true"
               or "start again over it with overwrite=true"
  error({message = string.format("%s; %s (or choose another run_dir)", what, ways), status = 2,
         same_on_all_ranks = true}, 0)
end

-- On resume: the checkpoint's recorded settings (nil when it records none:
-- an older strata wrote it, or it cannot be read, which the load reports).
local function checkpoint_settings(path)
  if not exists(path) then return nil end
  local c = M.checkpoint.open(path) -- collective
  if not c then return nil end
  local s = c:get_string("settings")
  c:close()
  return s ~= "" and s or nil
end

-- The data-parallel degree and the batch of a validated configuration on
-- `size` devices; devices(product) words where they come from for the
-- message (by default the ranks running).
function M.resolve_batch(cfg, size, devices)
  local p = cfg.parallel
  local refuse = cfg._refuse
  local model_ranks = p.tp * p.pp * p.sp
  local dp = p.dp == "auto" and size // model_ranks or p.dp
  local product = dp * model_ranks
  if product ~= size or dp < 1 then
    local why
    if devices then
      why = string.format("dp*tp*pp*sp = %d but %s", product, devices(product))
    else
      local ranks = string.format("%d rank%s", size, size == 1 and " is" or "s are")
      if p.dp ~= "auto" then
        why = string.format("dp*tp*pp*sp = %d but %s running (start with strata run -n %d)", product, ranks, product)
      elseif dp < 1 then
        why = string.format("tp*pp*sp = %d ranks hold one copy of the model but %s running (start with strata run -n %d)",
                            model_ranks, ranks, model_ranks)
      else
        why = string.format("tp*pp*sp = %d does not divide the %d ranks running (start with strata run -n %d)",
                            model_ranks, size, product)
      end
    end
    refuse("parallel.dp", p.dp, why, "parallel.tp", "parallel.pp", "parallel.sp")
  end
  cfg.parallel.dp = dp
  local t = cfg.train
  if t.global_batch then
    local per = dp * t.batch
    if t.global_batch % per ~= 0 then
      refuse("train.global_batch", t.global_batch,
             string.format("not a multiple of parallel.dp x train.batch = %d x %d = %d", dp, t.batch, per),
             "train.batch", "parallel.dp")
    end
    local accum_key = cfg._given["parallel.microbatches"] and "parallel.microbatches" or "train.accum"
    if cfg._given[accum_key] and t.accum ~= t.global_batch // per then
      refuse(accum_key, t.accum,
             string.format("train.global_batch = %d needs %d microbatches of %d on %d ranks",
                           t.global_batch, t.global_batch // per, t.batch, dp),
             "train.global_batch", "train.batch", "parallel.dp")
    end
    t.accum = t.global_batch // per
  end
  t.global_batch = dp * t.batch * t.accum
  local q = dp * t.batch -- a step's batch changes by whole microbatches on every replica
  if t.batch_start then
    local key = cfg._locate("train.batch_start")
    if t.batch_start > t.global_batch then
      raise(key, "train.batch_start", t.batch_start,
            string.format("exceeds train.global_batch = %d, where the warm-up ends", t.global_batch))
    end
    if t.batch_start % q ~= 0 then
      raise(key, "train.batch_start", t.batch_start,
            string.format("not a multiple of parallel.dp x train.batch = %d x %d = %d (the batch grows by microbatches)",
                          dp, t.batch, q))
    end
    local inc = t.batch_increment or q
    local ikey = cfg._locate("train.batch_increment")
    if inc % q ~= 0 then
      raise(ikey, "train.batch_increment", inc,
            string.format("not a multiple of parallel.dp x train.batch = %d x %d = %d (whole microbatches on every replica)",
                          dp, t.batch, q))
    end
    if t.batch_start % inc ~= 0 or t.global_batch % inc ~= 0 then
      raise(t.batch_increment and ikey or key, t.batch_increment and "train.batch_increment" or "train.batch_start",
            t.batch_increment or t.batch_start,
            string.format("train.batch_increment = %d must divide train.batch_start = %d and train.global_batch = %d",
                          inc, t.batch_start, t.global_batch))
    end
  end
  local o = cfg.optim
  if o.lr_scaling ~= "none" then
    local ref = o.lr_batch or t.global_batch
    local f = o.lr_scaling == "linear" and t.global_batch / ref or math.sqrt(t.global_batch / ref)
    if o.lr * f > 1e4 then -- (optim.lr's own bound is 100; LARS' global rates at large batches exceed it)
      local key = o.lr_batch and "optim.lr_batch" or "optim.lr_scaling"
      raise(cfg._locate(key), key, o.lr_batch or o.lr_scaling,
            string.format("optim.lr = %s scaled to the global batch %d gives %s, above 10^4", M.show_value(o.lr),
                          t.global_batch, M.show_value(o.lr * f)))
    end
  end
  if p.pp > 1 and p.schedule == "interleaved" and t.accum % p.pp ~= 0 then
    local key = cfg._given["parallel.microbatches"] and "parallel.microbatches"
                or cfg._given["train.global_batch"] and "train.global_batch" or "train.accum"
    refuse(key, cfg._given["train.global_batch"] and key == "train.global_batch" and t.global_batch or t.accum,
           string.format("the interleaved schedule needs microbatches per step (%d) a multiple of parallel.pp = %d",
                         t.accum, p.pp),
           "parallel.pp", "train.batch", "train.accum", "train.global_batch")
  end
end

-- An elastic run under strata run -n N (its launcher's slots in
-- STRATA_LAUNCH_SLOTS): the rank count it grows to once a batch warm-up
-- reaches the global batch (cfg._grow_ranks: the most ranks, up to
-- elastic.max_ranks and the slots, whose data-parallel microbatches divide
-- it), and, at its first launch, settings that would leave it no layout to
-- go on with, refused at their line.
function M.plan_elastic(cfg, size)
  local p, t, el, loc = cfg.parallel, cfg.train, cfg.elastic, cfg._locate
  local mr = p.tp * p.pp * p.sp
  local first = (os.getenv("STRATA_ELASTIC_RESTARTS") or "0") == "0"
  local slots = tonumber(os.getenv("STRATA_LAUNCH_SLOTS") or "")
  local from = os.getenv("STRATA_LAUNCH_SLOTS_FROM") or "the launch"
  local function divides(n, start) -- n ranks keep the step's batch (and a warm-up's start) on whole microbatches
    local q = n // mr * t.batch
    return n % mr == 0 and t.global_batch % q == 0 and (not start or start % q == 0)
  end
  local function range(lo, hi)
    return lo == hi and tostring(lo) or string.format("%d to %d", lo, hi)
  end
  local why = string.format("train.global_batch = %d into microbatches of train.batch = %d%s", t.global_batch, t.batch,
                            mr > 1 and string.format(" on every tp x pp x sp = %d ranks", mr) or "")
  if first and el.min_ranks > size then
    raise(loc("elastic.min_ranks"), "elastic.min_ranks", el.min_ranks,
          string.format("exceeds the %d rank%s the run starts on (strata run -n)", size, size == 1 and "" or "s"))
  end
  local top = size
  if el.max_ranks and t.batch_start then
    if first and slots and el.max_ranks > slots then
      raise(loc("elastic.max_ranks"), "elastic.max_ranks", el.max_ranks,
            string.format("exceeds the %d slots of %s", slots, from))
    end
    local most = slots and math.min(el.max_ranks, slots) or el.max_ranks
    for n = most, size + 1, -1 do
      if divides(n) then
        cfg._grow_batch, cfg._grow_ranks, top = t.global_batch, n, n
        break
      end
    end
    if first and not cfg._grow_ranks and most > size then
      raise(loc("elastic.max_ranks"), "elastic.max_ranks", el.max_ranks,
            string.format("no rank count from %s divides %s: the run could not grow", range(size + 1, most), why))
    end
  end
  if first then -- after a failure: fewer ranks than the run has at most
    for n = top - 1, el.min_ranks, -1 do
      if divides(n, top == size and t.batch_start or nil) then return end
    end
    if el.min_ranks >= top then
      raise(loc("elastic.min_ranks"), "elastic.min_ranks", el.min_ranks,
            string.format("leaves no rank to lose: the run has %d at most", top))
    end
    raise(loc("elastic.min_ranks"), "elastic.min_ranks", el.min_ranks,
          string.format("no rank count from %s divides %s: the run could not go on after a failure",
                        range(el.min_ranks, top - 1), why))
  end
end

function M.prepare_and_train(cfg)
  local rank, size = M.world()
  M.resolve_batch(cfg, size)
  local p, t = cfg.parallel, cfg.train
  local el = cfg.elastic
  if el.min_ranks and os.getenv("STRATA_ELASTIC_FILE") then M.plan_elastic(cfg, size) end
  if el.min_ranks and rank == 0 then -- what the launcher needs to relaunch after a rank's failure
    local file = os.getenv("STRATA_ELASTIC_FILE")
    local f = file and io.open(file, "a")
    if f then
      f:write(string.format("min_ranks=%d\nmax_restarts=%d\nglobal_batch=%d\nbatch=%d\nmodel_ranks=%d\nbatch_start=%d\n",
                            el.min_ranks, el.max_restarts, t.global_batch, t.batch, p.tp * p.pp * p.sp,
                            t.batch_start or 0))
      f:close()
    else
      io.stderr:write("strata: elastic: only strata run -n N relaunches a run; under mpirun a failure ends it\n")
    end
  end
  local resume = t.resume == true and cfg.checkpoint.path or t.resume or nil
  if not resume and not cfg.overwrite then refuse_earlier_run(cfg) end
  local d = cfg.data
  local data, err = M.data.open{
    source = d.source, path = d.path, val_path = d.val_path, val_fraction = d.val_fraction,
    seq = cfg.train.seq or cfg.model.seq, seed = d.seed, tokens = d.tokens, fanout = d.fanout, skew = d.skew,
    markov_seed = d.markov_seed}
  if not data then fail(err) end
  if cfg.model.vocab == "auto" then
    cfg.model.vocab = data:vocab()
    if cfg.model.vocab % p.tp ~= 0 then -- pad the vocabulary over the tensor ranks, as Megatron does
      cfg.model.vocab = (cfg.model.vocab + p.tp - 1) // p.tp * p.tp
    end
    local note = data:vocab_note()
    if note and rank == 0 then -- a warning: the run goes on
      io.stderr:write(string.format("strata: model.vocab = auto: %s; set model.vocab to size the model yourself\n", note))
    end
  elseif data:vocab() > cfg.model.vocab then
    raise(cfg._locate("model.vocab"), "model.vocab", cfg.model.vocab,
          string.format("the data holds token %d (vocabulary %d)", data:vocab() - 1, data:vocab()))
  end
  cfg._settings = M.settings_text(cfg, {["data.train_samples"] = data:samples("train"),
                                        ["data.val_samples"] = data:samples("val")})
  if resume then -- a changed setting is allowed (a new learning rate may be meant), and said once loaded
    local old = checkpoint_settings(resume)
    if old then cfg._resume_changes = table.concat(M.settings_changes(old, cfg._settings), ", ") end
  end
  if not M.train then
    data:close()
    fail("training needs the GPT model of libparallel (par_gpt) and liboptim, which this build " ..
         "of strata does not include yet")
  end
  M.last_run = M.train(cfg, data, {rank = rank, size = size})
  return M.last_run
end

-- Under `strata plan`, strata.experiment validates the recipe and the
-- command line as `strata run` does, then plans it instead of training: the
-- model, layout, batch (train.batch as the microbatch), precision and
-- offload of the recipe on the cluster of plan.cluster, else on this
-- machine sized to the layout's ranks. Errors point at the recipe's lines.
function M.plan_experiment(cfg)
  local m, p, t, loc = cfg.model, cfg.parallel, cfg.train, cfg._locate
  local function relocate(path, ok, r, ...) -- an error of strata.plan, placed at the recipe's key
    if ok then return r, ... end
    if type(r) == "table" and type(r.message) == "string" then
      local msg = r.message:gsub("^%[strata [%w_]+%]:%d+: ", "")
      if path == "plan.cluster" then
        msg = "plan.cluster = " .. M.show_value(cfg.plan.cluster) .. ": " .. msg:gsub("^cluster: ", "")
      end
      r.message = loc(path) .. ": " .. msg
    end
    error(r, 0)
  end
  local cluster, world, devices = cfg.plan.cluster, nil, nil
  if cluster ~= nil then
    local c = relocate("plan.cluster", pcall(M.cluster, cluster))
    world = c.nodes * c.gpus_per_node
    devices = function() return string.format("plan.cluster '%s' has %d devices", c.name, world) end
  else
    world = (p.dp == "auto" and 1 or p.dp) * p.tp * p.pp * p.sp
    if world > 1024 then
      raise(loc("parallel.dp"), "parallel.dp", p.dp,
            string.format("%d devices are more than this machine's plan holds (1024): set plan.cluster", world))
    end
    cluster = {base = "this-machine", nodes = 1, gpus_per_node = world}
  end
  M.resolve_batch(cfg, world, devices)
  local vocab = m.vocab
  if vocab == "auto" then -- as the run would find it: bytes, padded over the tensor ranks
    if cfg.data.source ~= "markov" and cfg.data.source ~= "text" then
      raise(loc("model.vocab"), "model.vocab", vocab,
            string.format('strata plan does not read the data (data.source = "%s"): set model.vocab', cfg.data.source))
    end
    vocab = (256 + p.tp - 1) // p.tp * p.tp
  end
  local tier = ({static = "cpu", nvme = "nvme"})[cfg.offload.policy]
  local parallel = {dp = p.dp, tp = p.tp, pp = p.pp, sp = p.sp, zero = p.zero, microbatch = t.batch,
                    global_batch = t.global_batch, precision = p.precision, seq_parallel = p.seq_parallel,
                    partition_activations = p.partition_activations, offload_optimizer = tier}
  if p.pp > 1 then parallel.schedule, parallel.interleave = p.schedule, p.interleave end
  -- 16-bit activations (parallel.activations, on a GPU): 2 bytes an element
  -- whatever the precision (the planner's default follows the precision)
  local params = p.activations ~= "f32" and {act_elem_bytes = 2} or nil
  local ok, plan = pcall(M.plan, {
    model = {layers = m.layers, hidden = m.hidden, heads = m.heads, seq = t.seq or m.seq, vocab = vocab,
             recompute = m.recompute},
    parallel = parallel, cluster = cluster, params = params})
  if not ok then -- a layout the planner refuses: at the recipe's parallel section (its precision for a missing peak)
    local msg = type(plan) == "table" and tostring(plan.message) or ""
    relocate(msg:find(" peak") and "parallel.precision" or "parallel", false, plan)
  end
  if params then
    print(string.format('note: parallel.activations = "%s": activations planned in 16 bits (2 bytes an element)',
                        p.activations))
  end
  if cfg.offload.policy == "chunks" then
    print('note: offload.policy = "chunks" (PatrickStar\'s) is not in the planner\'s model: planned without offload')
  end
  if not cfg._given["parallel.precision"] then
    local c = M.cluster(cluster)
    local best = c["peak_flops.bf16"] > 0 and "bf16" or c["peak_flops.fp16"] > 0 and "fp16" or nil
    if best and c["peak_flops." .. best] > c["peak_flops.fp32"] then
      print(string.format('note: parallel.precision is not set, so this plan is in fp32, as strata run trains; ' ..
                          'parallel.precision = "%s" plans mixed precision (%.4g TFLOP/s peak against %.4g)',
                          best, c["peak_flops." .. best] / 1e12, c["peak_flops.fp32"] / 1e12))
    end
  end
  return plan
end
