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
            "not used: this recipe calls no strata.experiment and never asked for it with strata.option")
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
  return M.prepare_and_train(cfg)
end

function M.prepare_and_train(cfg)
  local rank, size = M.world()
  local p = cfg.parallel
  local dp = p.dp == "auto" and size // (p.tp * p.pp * p.sp) or p.dp
  local product = dp * p.tp * p.pp * p.sp
  if product ~= size or dp < 1 then
    raise(cfg._locate("parallel.dp"), "parallel.dp", p.dp,
          string.format("dp*tp*pp*sp = %d but %d ranks are running (start with strata run -n %d)",
                        product, size, product))
  end
  cfg.parallel.dp = dp
  local t = cfg.train
  if t.global_batch then
    local per = dp * t.batch
    if t.global_batch % per ~= 0 then
      raise(cfg._locate("train.global_batch"), "train.global_batch", t.global_batch,
            string.format("not a multiple of parallel.dp x train.batch = %d x %d = %d", dp, t.batch, per))
    end
    local accum_key = cfg._given["parallel.microbatches"] and "parallel.microbatches" or "train.accum"
    if cfg._given[accum_key] and t.accum ~= t.global_batch // per then
      raise(cfg._locate(accum_key), accum_key, t.accum,
            string.format("train.global_batch = %d needs %d microbatches of %d on %d ranks",
                          t.global_batch, t.global_batch // per, t.batch, dp))
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
    raise(cfg._locate(key), key, cfg._given["train.global_batch"] and key == "train.global_batch" and t.global_batch or t.accum,
          string.format("the interleaved schedule needs microbatches per step (%d) a multiple of parallel.pp = %d",
                        t.accum, p.pp))
  end
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
  if not M.train then
    data:close()
    fail("training needs the GPT model of libparallel (par_gpt) and liboptim, which this build " ..
         "of strata does not include yet")
  end
  M.last_run = M.train(cfg, data, {rank = rank, size = size})
  return M.last_run
end
