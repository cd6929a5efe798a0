-- The recipe schema of strata.experiment{...}: every section, key, type,
-- range and default; cross-key checks; command-line overrides by dotted
-- path. A violation stops the run before anything is allocated with one
-- line "FILE:LINE: key = value: why" and exit status 2.
local M = ...

local INT, NUM, STR, BOOL, ENUM = "integer", "number", "string", "boolean", "enum"

-- spec fields: t (type), min/max (inclusive), gt/lt (exclusive), values
-- (enum), also (a second accepted literal, e.g. "auto" or false), default,
-- doc (one line, shown by docs/recipes.md).
local sections = {
  model = {
    layers = {t = INT, min = 1, max = 1024, default = 2, doc = "transformer blocks"},
    hidden = {t = INT, min = 1, max = 1 << 20, default = 64, doc = "model width"},
    heads = {t = INT, min = 1, max = 4096, default = 4, doc = "attention heads (divide hidden)"},
    seq = {t = INT, min = 1, max = 1 << 20, default = 64, doc = "sequence length (tokens per sample)"},
    vocab = {t = INT, min = 1, max = 1 << 24, also = "auto", default = "auto",
             doc = "vocabulary size; auto: the data's"},
    recompute = {t = BOOL, default = false, doc = "recompute block activations in backward"},
    init = {t = STR, doc = "weights to start from: a strata checkpoint, llm.c model or safetensors (its sizes replace the recipe's)"},
  },
  data = {
    source = {t = ENUM, values = {"markov", "text", "uint16", "uint32", "llmc", "auto"},
              default = "markov", doc = "generated Markov corpus or a file format"},
    path = {t = STR, doc = "file or glob of shards (not for markov)"},
    val_path = {t = STR, doc = "separate validation file or glob"},
    val_fraction = {t = NUM, min = 0, lt = 1, default = 0.1,
                    doc = "share of each shard held out for validation"},
    seed = {t = INT, min = 0, default = 1, doc = "shuffling seed (and corpus path seed)"},
    tokens = {t = INT, min = 1024, max = 1 << 34, default = 1 << 22,
              doc = "size of the generated corpus"},
    fanout = {t = INT, min = 1, max = 256, default = 8, doc = "successors per byte in the Markov source"},
    skew = {t = NUM, min = 0, max = 16, default = 1.0,
            doc = "0: uniform transition rows; larger: more peaked"},
    markov_seed = {t = INT, min = 0, default = 1234, doc = "seed of the transition table"},
  },
  parallel = {
    dp = {t = INT, min = 1, max = 1 << 20, also = "auto", default = "auto",
          doc = "data-parallel degree; auto: all ranks"},
    tp = {t = INT, min = 1, max = 4096, default = 1,
          doc = "tensor-parallel degree (Megatron 1D, consecutive ranks); divides model.heads and the vocabulary"},
    tp_mode = {t = ENUM, values = {"1d", "2d", "2.5d", "3d"}, default = "1d",
               doc = "tensor parallelism over the tp ranks: Megatron's 1d, Optimus' 2d (SUMMA over q x q = tp), Tesseract's 2.5d (tp_depth stacked q x q meshes) or the 3d cube (q^3 = tp); 2d-3d train with dp and ZeRO, not yet with pp, sp or seq_parallel"},
    tp_depth = {t = INT, min = 1, max = 4096, default = 1,
                doc = 'the stacked meshes of tp_mode = "2.5d" (tp = q x q x tp_depth)'},
    pp = {t = INT, min = 1, max = 4096, default = 1,
          doc = "pipeline stages (contiguous blocks; the outermost ranks); divides model.layers"},
    schedule = {t = ENUM, values = {"gpipe", "1f1b", "interleaved"}, default = "1f1b",
                doc = "pipeline schedule with pp > 1: GPipe, 1F1B (PipeDream-Flush) or Megatron's interleaved 1F1B"},
    interleave = {t = INT, min = 1, max = 1024, default = 1,
                  doc = 'model chunks per stage for schedule = "interleaved" (>= 2)'},
    microbatches = {t = INT, min = 1, max = 1 << 20,
                    doc = "microbatches per step through the pipeline (the same as train.accum)"},
    sp = {t = INT, min = 1, max = 4096, default = 1,
          doc = "sequence parallelism by ring self-attention: sp consecutive ranks share each sequence, T / sp tokens each (divides model.seq; with dp and tp, pp = 1)"},
    zero = {t = INT, min = 0, max = 3, default = 0,
            doc = "ZeRO stage: 1 shards the optimizer state over dp, 2 the gradients too, 3 the parameters too"},
    bucket_mb = {t = NUM, gt = 0, max = 1 << 20, default = 25,
                 doc = "MiB per gradient reduction posted during backward (ZeRO 0-2)"},
    seq_parallel = {t = BOOL, default = false,
                    doc = "with tp > 1: Megatron's sequence parallelism (layernorms on a chunk of the tokens; activations / tp)"},
    partition_activations = {t = BOOL, default = false,
                             doc = "with model.recompute and tp > 1: DeepSpeed's partitioned checkpoints (each block input split over tp, gathered to recompute)"},
    precision = {t = ENUM, values = {"fp32", "bf16", "fp16"}, default = "fp32",
                 doc = "parameters, gradients and communication; bf16/fp16 keep fp32 masters and compute in fp32"},
    device = {t = ENUM, values = {"cpu", "cuda", "auto"}, default = "cpu",
              doc = "where each rank trains: cpu; cuda: one GPU per rank (its place on its node modulo the node's GPUs), collectives through NCCL (ranks sharing a GPU: through pinned host memory and MPI, one notice line); auto: cuda when every rank has a GPU, else cpu (one notice line); STRATA_DEVICE=cpu forces cpu"},
    bf16_matmul = {t = BOOL, default = false,
                   doc = "on a GPU: the model's GEMMs with bf16 inputs and fp32 accumulation (tensor cores); ignored on the CPU"},
    activations = {t = ENUM, values = {"f32", "bf16", "f16"}, default = "f32",
                   doc = "on a GPU: the dtype the model keeps its activations and their gradients in (bf16, f16: half the activation memory, 16-bit GEMMs and attention with fp32 accumulation, fp32 layernorm, softmax and loss statistics); the CPU computes in f32. With tp_mode = \"1d\" tensor parallelism (its collectives in 16 bits), ring self-attention (sp > 1, its blocks on fp32 copies) and pipeline stages (16-bit messages, half the bytes); not with tp_mode 2d, 2.5d or 3d in this version"},
  },
  optim = {
    name = {t = ENUM, values = {"adamw", "sgd", "momentum", "nesterov", "lamb", "lars"},
            default = "adamw", doc = "optimizer"},
    lr = {t = NUM, gt = 0, max = 100, default = 1e-3, doc = "peak learning rate"},
    min_lr = {t = NUM, min = 0, default = 0, doc = "learning rate at the end of the decay"},
    schedule = {t = ENUM, values = {"constant", "cosine", "linear"}, default = "cosine",
                doc = "decay after warm-up"},
    warmup = {t = INT, min = 0, default = 0, doc = "linear warm-up steps"},
    weight_decay = {t = NUM, min = 0, max = 10, default = 0.0, doc = "decoupled weight decay"},
    beta1 = {t = NUM, min = 0, lt = 1, f32 = true, default = 0.9, doc = "Adam/LAMB first-moment decay"},
    beta2 = {t = NUM, min = 0, lt = 1, f32 = true, default = 0.95, doc = "Adam/LAMB second-moment decay"},
    eps = {t = NUM, gt = 0, max = 1, default = 1e-8, doc = "Adam/LAMB epsilon"},
    momentum = {t = NUM, min = 0, lt = 1, f32 = true, default = 0.9, doc = "SGD/LARS momentum"},
    clip = {t = NUM, min = 0, default = 1.0, doc = "global gradient-norm clip; 0: off"},
    lr_scaling = {t = ENUM, values = {"none", "linear", "sqrt"}, default = "none",
                  doc = "the peak rate for a step of global batch B: optim.lr x B / optim.lr_batch (linear: Goyal et al., SGD, LARS), x sqrt(B / optim.lr_batch) (sqrt: LAMB, AdamW), or optim.lr (none)"},
    lr_batch = {t = INT, min = 1, max = 1 << 30,
                doc = "with optim.lr_scaling: the global batch at which optim.lr holds (default train.global_batch)"},
  },
  train = {
    steps = {t = INT, min = 1, max = 1 << 40, default = 100, doc = "optimizer steps"},
    batch = {t = INT, min = 1, max = 1 << 20, default = 8, doc = "sequences per rank per microbatch"},
    accum = {t = INT, min = 1, max = 1 << 20, default = 1,
             doc = "microbatches per step (gradient accumulation; reduced once, after the last)"},
    global_batch = {t = INT, min = 1, max = 1 << 30,
                    doc = "sequences per step over all ranks; sets train.accum (default batch x accum x dp)"},
    seq = {t = INT, min = 1, max = 1 << 20, doc = "tokens per training sample (default model.seq; at most that)"},
    batch_start = {t = INT, min = 1, max = 1 << 30,
                   doc = "batch warm-up (GPT-3, MT-NLG): the global batch of the first step, growing to train.global_batch in multiples of parallel.dp x train.batch (more microbatches per step)"},
    batch_increment = {t = INT, min = 1, max = 1 << 30,
                       doc = "the batch warm-up's step in sequences (MT-NLG: 32); a multiple of parallel.dp x train.batch that divides train.batch_start and train.global_batch (default parallel.dp x train.batch), so the schedule is the same on any number of ranks"},
    batch_warmup = {t = INT, min = 0, default = 0,
                    doc = "steps over which the global batch grows from train.batch_start (linearly, rounded down)"},
    batch_warmup_tokens = {t = INT, min = 0, max = 1 << 50, default = 0,
                           doc = "or the tokens over which it grows (GPT-3 counts tokens)"},
    eval_every = {t = INT, min = 0, default = 50, doc = "validation every N steps; 0: only at the end"},
    eval_batches = {t = INT, min = 1, max = 1 << 20, default = 8, doc = "validation batches per evaluation"},
    log_every = {t = INT, min = 1, default = 10, doc = "log line every N steps when not a terminal"},
    seed = {t = INT, min = 0, default = 1, doc = "model initialisation seed"},
    resume = {t = BOOL, also_type = STR, default = false,
              doc = "true: continue from checkpoint.path; a string: from that file"},
    collective_timeout = {t = NUM, min = 0, max = 1e6, default = 10,
                          doc = "minutes a collective waits for a missing rank before the run ends with a report; 0: forever"},
    loss_scale = {t = NUM, min = 1, max = 1 << 24, default = 65536,
                  doc = "fp16: initial dynamic loss scale (halved on overflow, the step skipped)"},
    loss_scale_window = {t = INT, min = 1, max = 1 << 30, default = 1000,
                         doc = "fp16: good steps in a row before the loss scale doubles"},
    diverge_factor = {t = NUM, min = 0, default = 4,
                      doc = "the run stops when the loss exceeds this many times the first step's; 0: only a loss that is not finite"},
  },
  checkpoint = {
    path = {t = STR, doc = "checkpoint file (default RUN_DIR/checkpoint.h5)"},
    every = {t = INT, min = 0, default = 0, doc = "save every N steps; 0: only at the end"},
    final = {t = BOOL, default = true, doc = "save after the last step"},
    on_error = {t = ENUM, values = {"stop", "continue"}, default = "stop",
                doc = "a failed save (full disk): stop the run, or report it and train on"},
  },
  offload = {
    policy = {t = ENUM, values = {"none", "static", "nvme", "chunks"}, default = "none",
              doc = "static: ZeRO-Offload's optimizer state (fp32 masters, moments) in liboffload's host tier, updated on the CPU; nvme: ZeRO-Infinity's, on the NVMe tier, streamed through the host region by region; chunks: PatrickStar's, parameters, gradients and optimizer state in chunks that move between device and host as the step needs them (ZeRO stage 0: chunks on every rank, gradient chunks allreduced; 3: each rank keeps its share of the chunks, gathered and reduce-scattered by groups, one microbatch a step; tp = pp = 1; needs device_mb)"},
    nvme_dir = {t = STR, doc = "with policy = \"nvme\": the NVMe tier's directory (default $TMPDIR or /tmp)"},
    device_mb = {t = NUM, min = 0, default = 0, doc = "the device's memory in MiB (on the CPU path a cap standing in for a GPU's); 0: no cap"},
    host_mb = {t = NUM, min = 0, default = 0, doc = "liboffload's host tier in MiB (static and chunks); 0: what the policy needs"},
    chunk_mb = {t = NUM, min = 0, default = 0, doc = "with policy = \"chunks\": the chunks' size in MiB; 0: PatrickStar's search (the size that wastes least)"},
  },
  elastic = {
    min_ranks = {t = INT, min = 1, max = 1 << 20,
                 doc = "an elastic run (strata run -n N): when a rank fails after a checkpoint, the launcher relaunches on the ranks left (as few as this; the failed rank's slot leaves its machine; the most whose microbatches divide the global batch and that the planner says fit in memory) from it, with the same global batch and learning rate"},
    max_restarts = {t = INT, min = 0, max = 1000, default = 3, doc = "relaunches an elastic run makes at most"},
    max_ranks = {t = INT, min = 1, max = 1 << 20,
                 doc = "with a batch warm-up (train.batch_start): when the global batch reaches train.global_batch, the run stops with a checkpoint and the launcher relaunches it on up to this many ranks (the most whose microbatches divide the batch; at most the slots of strata run's hostfile or Slurm allocation)"},
  },
  plan = {
    cluster = {t = STR, also_type = "table",
               doc = "strata plan only: the cluster to plan on, a preset name (recipes/clusters/) or a table of its fields (base = a preset, nodes, ...); default this machine with the layout's ranks"},
  },
  metrics = {
    path = {t = STR, doc = "metrics file (default RUN_DIR/metrics.h5)"},
    plot = {t = STR, also = false, doc = "loss plot (default RUN_DIR/loss.png); false: none"},
    every = {t = INT, min = 1, default = 1, doc = "append metrics every N steps"},
  },
}

local top = {
  name = {t = STR, default = "experiment", doc = "name of the run (title of plots)"},
  run_dir = {t = STR, doc = "output folder (default runs/NAME)"},
  overwrite = {t = BOOL, default = false,
               doc = "start again over an earlier run's checkpoint, metrics and plot; false: such a run refuses to start"},
}

M.schema = {sections = sections, top = top}

-- ---------------------------------------------------------------- helpers

local function sorted_keys(t)
  local k = {}
  for key in pairs(t) do k[#k + 1] = key end
  table.sort(k)
  return k
end

local function show(v)
  if v ~= v then return "nan" end
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "table" then return "{...}" end
  if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 1e15 then
    return string.format("%.1f", v)
  end
  if math.type(v) == "float" then -- the shortest decimal that reads back as v
    for p = 14, 17 do
      local t = string.format("%." .. p .. "g", v)
      if tonumber(t) == v then return t end
    end
  end
  return tostring(v)
end
M.show_value = show

local function distance(a, b) -- Levenshtein, for "did you mean"
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = {[0] = i}
    for j = 1, #b do
      local c = (a:sub(i, i) == b:sub(j, j)) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + c)
    end
    prev = cur
  end
  return prev[#b]
end

local function unknown_why(key, known)
  local best, bd = nil, 3
  for _, k in ipairs(known) do
    local d = distance(key, k)
    if d < bd then best, bd = k, d end
  end
  if best then return string.format("unknown key (did you mean '%s'?)", best) end
  return "unknown key (known: " .. table.concat(known, ", ") .. ")"
end

-- ------------------------------------------------------- error locations

-- A location finder for one recipe: the line of the strata.experiment
-- call, refined to the line where the offending key is written (searched
-- forward, section first, then key); overrides report "command line".
local function locator(src_path, call_line, overridden)
  local lines
  if src_path then
    local f = io.open(src_path, "r")
    if f then
      lines = {}
      for l in f:lines() do lines[#lines + 1] = l end
      f:close()
    end
  end
  return function(path)
    if overridden[path] then return "command line" end
    local line = call_line or 0
    if lines and call_line then
      for part in path:gmatch("[^.]+") do
        local pat = "%f[%w_]" .. part:gsub("%p", "%%%0") .. "%s*="
        for i = line, #lines do
          if lines[i]:find(pat) then line = i break end
        end
      end
    end
    return string.format("%s:%d", src_path or "recipe", line)
  end
end

local function raise(where, path, value, why)
  error({message = string.format("%s: %s = %s: %s", where, path, show(value), why),
         status = 2, same_on_all_ranks = true}, 0)
end
M.schema_error = raise

-- ------------------------------------------------------------ validation

local function check_value(loc, path, v, spec)
  if v == nil then return end
  if spec.also ~= nil and v == spec.also then return v end
  if spec.also_type and type(v) == spec.also_type then return v end
  local t = spec.t
  local expect = t
  if spec.also ~= nil then expect = t .. " or " .. show(spec.also) end
  if spec.also_type then expect = t .. " or " .. spec.also_type end
  if t == INT then
    if math.type(v) ~= "integer" then
      if type(v) == "number" and v == math.floor(v) and math.abs(v) < 2^53 then
        v = math.tointeger(v) -- 64.0 is accepted as 64
      elseif type(v) == "number" and v == math.floor(v) then -- whole, beyond exact integers
        raise(loc(path), path, v, "expected " .. expect .. ", got a number too large for one" ..
              (spec.max and " (at most " .. show(spec.max) .. ")" or ""))
      else
        raise(loc(path), path, v, "expected " .. expect .. ", got " ..
              (type(v) == "number" and (v ~= v and "nan" or "a fraction") or type(v)))
      end
    end
  elseif t == NUM then
    if type(v) ~= "number" then raise(loc(path), path, v, "expected a number, got " .. type(v)) end
    if v ~= v or v == math.huge or v == -math.huge then
      raise(loc(path), path, v, "must be a finite number")
    end
  elseif t == STR then
    if type(v) ~= "string" then raise(loc(path), path, v, "expected " .. expect .. ", got " .. type(v)) end
    if v == "" then raise(loc(path), path, v, "must not be empty") end
  elseif t == BOOL then
    if type(v) ~= "boolean" then raise(loc(path), path, v, "expected " .. expect .. ", got " .. type(v)) end
  elseif t == ENUM then
    local ok = false
    for _, a in ipairs(spec.values) do ok = ok or a == v end
    if not ok then
      raise(loc(path), path, v, "expected one of " .. table.concat(spec.values, ", "))
    end
  end
  if t == INT or t == NUM then
    if spec.min and v < spec.min then
      if spec.max and spec.min == spec.max then
        raise(loc(path), path, v, "must be " .. show(spec.min) .. " in this build")
      end
      raise(loc(path), path, v, "must be >= " .. show(spec.min))
    end
    if spec.max and v > spec.max then
      if spec.min and spec.min == spec.max then
        raise(loc(path), path, v, "must be " .. show(spec.max) .. " in this build")
      end
      raise(loc(path), path, v, "must be <= " .. show(spec.max))
    end
    if spec.gt and v <= spec.gt then raise(loc(path), path, v, "must be > " .. show(spec.gt)) end
    if spec.lt and v >= spec.lt then raise(loc(path), path, v, "must be < " .. show(spec.lt)) end
    -- The optimizer computes in float32: a bound that holds in double must
    -- still hold once the value is rounded.
    local f = spec.f32 and string.unpack("<f", string.pack("<f", v))
    if f and spec.lt and f >= spec.lt then
      raise(loc(path), path, v, string.format("rounds to %s in float32, the optimizer's precision; use at most %.8g",
                                              show(f), string.unpack("<f", string.pack("<I4", 0x3f7fffff))))
    end
  end
  return v
end

-- Settings that this configuration never reads are an error when the
-- recipe or the command line sets them (given: their dotted paths), except
-- a recipe's own settings that an override of the deciding key (say
-- data.source=text on quickstart.lua's Markov corpus) leaves unread.
local function check_unread(c, loc, given)
  local d, o = c.data, c.optim
  local decider
  local function unread(path, why)
    local switched = loc(decider) == "command line" and loc(path) ~= "command line"
    if given[path] and not switched then
      local sec, key = path:match("^(%w+)%.([%w_]+)$")
      raise(loc(path), path, sec and c[sec][key] or c[path], "not used " .. why)
    end
  end
  decider = "train.resume"
  if c.train.resume then
    unread("overwrite", "when resuming (train.resume continues the run in place; overwrite=true starts again over it)")
  end
  decider = "parallel.pp"
  if c.parallel.pp == 1 then
    for _, k in ipairs{"schedule", "interleave"} do
      unread("parallel." .. k, "with parallel.pp = 1 (no pipeline)")
    end
  end
  decider = "elastic.min_ranks"
  if not c.elastic.min_ranks then
    for _, k in ipairs{"max_restarts", "max_ranks"} do unread("elastic." .. k, "without elastic.min_ranks (not an elastic run)") end
  elseif c.elastic.max_ranks and c.elastic.min_ranks > c.elastic.max_ranks then
    raise(loc("elastic.min_ranks"), "elastic.min_ranks", c.elastic.min_ranks,
          string.format("exceeds elastic.max_ranks = %d", c.elastic.max_ranks))
  end
  decider = "parallel.tp_mode"
  if c.parallel.tp_mode ~= "2.5d" then
    unread("parallel.tp_depth", string.format('with parallel.tp_mode = "%s" (2.5d only)', c.parallel.tp_mode))
  end
  decider = "offload.policy"
  if c.offload.policy ~= "nvme" then
    unread("offload.nvme_dir", string.format('with offload.policy = "%s" (nvme only)', c.offload.policy))
  end
  if c.offload.policy ~= "chunks" then
    unread("offload.chunk_mb", string.format('with offload.policy = "%s" (chunks only)', c.offload.policy))
  end
  if c.offload.policy ~= "chunks" and c.offload.policy ~= "static" then
    unread("offload.host_mb", string.format('with offload.policy = "%s" (static and chunks)', c.offload.policy))
  end
  if c.offload.policy == "chunks" and c.offload.device_mb <= 0 then
    raise(loc("offload.policy"), "offload.policy", "chunks", "needs offload.device_mb, the device's budget in MiB")
  end
  decider = "data.source"
  if d.source ~= "markov" then
    for _, k in ipairs{"tokens", "fanout", "skew", "markov_seed"} do
      unread("data." .. k, string.format('with data.source = "%s" (it shapes the generated Markov corpus)', d.source))
    end
  end
  decider = "optim.name"
  if o.name ~= "adamw" and o.name ~= "lamb" then
    for _, k in ipairs{"beta1", "beta2", "eps"} do
      unread("optim." .. k, string.format('by optim.name = "%s" (AdamW and LAMB only)', o.name))
    end
  end
  if o.name == "adamw" or o.name == "lamb" or o.name == "sgd" then
    unread("optim.momentum", string.format('by optim.name = "%s" (momentum, nesterov and lars only)', o.name))
  end
  if o.lr_scaling == "none" then
    unread("optim.lr_batch", 'with optim.lr_scaling = "none" (the rate does not follow the batch)')
  end
  decider = "parallel.precision"
  if c.parallel.precision ~= "fp16" then
    for _, k in ipairs{"loss_scale", "loss_scale_window"} do
      unread("train." .. k, string.format('with parallel.precision = "%s" (fp16 only)', c.parallel.precision))
    end
  end
end

-- Cross-key checks on the completed configuration. refuse(path, value, why,
-- ...) reports `path`, blaming the command line when one of the other keys
-- named (the ones the check also reads) was set there.
local function check_relations(c, refuse)
  local m, d, o, t = c.model, c.data, c.optim, c.train
  if m.hidden % m.heads ~= 0 then
    refuse("model.heads", m.heads, string.format("does not divide model.hidden = %d", m.hidden), "model.hidden")
  end
  if d.source == "markov" then
    if d.path then refuse("data.path", d.path, 'not used by data.source = "markov"', "data.source") end
    local seq = t.seq or m.seq
    if d.tokens < 2 * (seq + 1) then
      refuse("data.tokens", d.tokens, string.format("too small for samples of %d tokens", seq), "train.seq", "model.seq")
    end
  elseif not d.path then
    refuse("data.path", nil, string.format('required for data.source = "%s"', d.source), "data.source")
  end
  local par = c.parallel
  if par.tp_mode ~= "1d" then
    -- the mesh's side q, the row blocks a batch is cut in, and what the blocks cut
    local function root(n, k)
      local r = math.floor(n ^ (1 / k) + 0.5)
      return r ^ k == n and r or nil
    end
    local d = par.tp_mode == "2.5d" and par.tp_depth or 1
    local q
    if par.tp_mode == "3d" then q = root(par.tp, 3) elseif par.tp % d == 0 then q = root(par.tp // d, 2) end
    if not q then
      refuse("parallel.tp", par.tp,
             par.tp_mode == "3d" and "is not a cube (3d tensor parallelism needs tp = q^3)"
             or par.tp_mode == "2d" and "is not a square (2d tensor parallelism needs tp = q^2)"
             or string.format("is not q^2 x parallel.tp_depth = q^2 x %d (2.5d tensor parallelism)", d),
             "parallel.tp_mode", "parallel.tp_depth")
    end
    local cut = par.tp_mode == "3d" and q * q or q
    if m.heads % q ~= 0 then
      refuse("model.heads", m.heads,
             string.format("does not divide over the %s mesh's side q = %d (each rank holds whole heads)", par.tp_mode, q),
             "parallel.tp", "parallel.tp_mode", "parallel.tp_depth")
    end
    if m.hidden % cut ~= 0 then
      refuse("model.hidden", m.hidden,
             string.format("does not divide into the %s blocks of %d (the weights are cut in q%s blocks)", par.tp_mode,
                           cut, par.tp_mode == "3d" and "^2" or ""), "parallel.tp", "parallel.tp_mode", "parallel.tp_depth")
    end
    local rows = par.tp_mode == "3d" and q * q or d * q
    if t.batch % rows ~= 0 then
      refuse("train.batch", t.batch,
             string.format("does not divide over the %d row blocks of %s tensor parallelism (each rank keeps whole sequences)",
                           rows, par.tp_mode), "parallel.tp", "parallel.tp_mode", "parallel.tp_depth")
    end
    if par.pp > 1 or par.sp > 1 or par.seq_parallel or par.partition_activations or c.offload.policy == "chunks" then
      refuse("parallel.tp_mode", par.tp_mode,
             "trains with data parallelism and ZeRO only (no parallel.pp, parallel.sp, seq_parallel, partition_activations or chunk offload) in this version",
             "parallel.pp", "parallel.sp", "parallel.seq_parallel", "parallel.partition_activations", "offload.policy")
    end
  end
  if par.tp_mode == "1d" and m.heads % c.parallel.tp ~= 0 then
    refuse("parallel.tp", c.parallel.tp,
           string.format("does not divide model.heads = %d (each tensor rank holds whole heads)", m.heads), "model.heads")
  end
  if par.tp_mode == "1d" and m.vocab ~= "auto" and m.vocab % c.parallel.tp ~= 0 then
    refuse("parallel.tp", c.parallel.tp,
           string.format("does not divide model.vocab = %d (the vocabulary is split over the tensor ranks; pad it)", m.vocab),
           "model.vocab")
  end
  if c.parallel.sp > 1 and (t.seq or m.seq) % c.parallel.sp ~= 0 then
    refuse("parallel.sp", c.parallel.sp,
           string.format("does not divide the %d tokens per sample (ring self-attention gives each rank T / sp)",
                         t.seq or m.seq), "train.seq", "model.seq")
  end
  if c.parallel.sp > 1 and (c.parallel.pp > 1 or c.parallel.seq_parallel or c.offload.policy == "chunks") then
    refuse("parallel.sp", c.parallel.sp,
           "ring self-attention runs with data and tensor parallelism and ZeRO (parallel.pp = 1, no parallel.seq_parallel, no chunk offload) in this version",
           "parallel.pp", "parallel.seq_parallel", "offload.policy")
  end
  if c.parallel.seq_parallel and c.parallel.tp < 2 then
    refuse("parallel.seq_parallel", true, "needs parallel.tp > 1 (it splits tensor parallelism's whole regions)", "parallel.tp")
  end
  if c.parallel.seq_parallel and (t.batch * (t.seq or m.seq)) % c.parallel.tp ~= 0 then
    refuse("parallel.seq_parallel", true,
           string.format("train.batch x tokens per sample = %d do not divide over parallel.tp = %d", t.batch * (t.seq or m.seq), c.parallel.tp),
           "train.batch", "train.seq", "model.seq", "parallel.tp")
  end
  local p = c.parallel
  if p.interleave > 1 and p.schedule ~= "interleaved" then
    refuse("parallel.interleave", p.interleave,
           string.format('needs parallel.schedule = "interleaved" (not "%s")', p.schedule), "parallel.schedule")
  end
  if p.schedule == "interleaved" and p.interleave < 2 then
    refuse("parallel.schedule", p.schedule, "needs parallel.interleave >= 2 chunks per stage", "parallel.interleave")
  end
  if m.layers % (p.pp * p.interleave) ~= 0 then
    local key = p.interleave > 1 and "parallel.interleave" or "parallel.pp"
    refuse(key, p.interleave > 1 and p.interleave or p.pp,
           string.format("model.layers = %d do not divide into parallel.pp = %d stages x %d chunks", m.layers, p.pp, p.interleave),
           "model.layers", "parallel.pp", "parallel.interleave")
  end
  if p.partition_activations then
    local why = not m.recompute and "needs model.recompute = true (it splits the block inputs recompute keeps)"
                or p.tp < 2 and "needs parallel.tp > 1 (it splits the kept block inputs over the tensor group)"
                or p.seq_parallel and "has nothing to split with parallel.seq_parallel (the kept inputs are split already)"
    if why then
      refuse("parallel.partition_activations", true, why, "model.recompute", "parallel.tp", "parallel.seq_parallel")
    end
  end
  if p.activations ~= "f32" then
    local why = p.device == "cpu"
                  and string.format('keeps the activations in 16 bits on a GPU only (the CPU computes in f32); set parallel.device = "cuda" or parallel.activations = "f32"')
                or p.tp > 1 and p.tp_mode ~= "1d" and string.format(
                     'is not yet with tp_mode = "%s" (its layers keep f32 activations; tp_mode = "1d" takes them)', p.tp_mode)
    if why then
      refuse("parallel.activations", p.activations, why, "parallel.device", "parallel.tp", "parallel.tp_mode")
    end
  end
  if c.parallel.zero >= 2 and c.parallel.pp > 1 then
    refuse("parallel.zero", c.parallel.zero,
           string.format("ZeRO 2 and 3 shard what pipeline stages need whole; use 0 or 1 with parallel.pp = %d", c.parallel.pp),
           "parallel.pp")
  end
  if t.seq and t.seq > m.seq then
    refuse("train.seq", t.seq, string.format("exceeds model.seq = %d, the model's positions", m.seq), "model.seq")
  end
  if o.min_lr > o.lr then
    refuse("optim.min_lr", o.min_lr, string.format("exceeds optim.lr = %s", show(o.lr)), "optim.lr")
  end
  if t.batch_start and t.batch_warmup == 0 and t.batch_warmup_tokens == 0 then
    refuse("train.batch_start", t.batch_start,
          "needs train.batch_warmup (steps) or train.batch_warmup_tokens over which the batch grows")
  end
  if not t.batch_start and (t.batch_warmup > 0 or t.batch_warmup_tokens > 0) then
    local k = t.batch_warmup > 0 and "batch_warmup" or "batch_warmup_tokens"
    refuse("train." .. k, t[k], "needs train.batch_start, the global batch of the first step")
  end
  if t.batch_warmup > 0 and t.batch_warmup_tokens > 0 then
    refuse("train.batch_warmup_tokens", t.batch_warmup_tokens,
          string.format("a second warm-up length: give train.batch_warmup = %d steps or tokens, not both", t.batch_warmup))
  end
  if t.batch_warmup >= t.steps and t.batch_warmup > 0 then
    refuse("train.batch_warmup", t.batch_warmup,
          string.format("must be below train.steps = %d", t.steps), "train.steps")
  end
  if t.batch_increment and not t.batch_start then
    refuse("train.batch_increment", t.batch_increment, "needs train.batch_start (a batch warm-up)")
  end
  if t.batch_start and (c.parallel.pp > 1 or c.offload.policy == "chunks") then
    refuse("train.batch_start", t.batch_start,
          c.parallel.pp > 1 and string.format("a pipeline's microbatches per step are fixed (parallel.pp = %d); batch warm-up needs parallel.pp = 1", c.parallel.pp)
          or 'the chunk policy\'s schedule is fixed (offload.policy = "chunks"); batch warm-up needs another policy',
          "parallel.pp", "offload.policy")
  end
  if o.warmup >= t.steps and o.warmup > 0 then
    refuse("optim.warmup", o.warmup, string.format("must be below train.steps = %d", t.steps), "train.steps")
  end
  if t.eval_every > 0 and d.val_fraction == 0 and not d.val_path then
    refuse("train.eval_every", t.eval_every, "needs validation data (data.val_fraction > 0 or data.val_path)",
           "data.val_fraction", "data.val_path")
  end
  local bytes = d.source == "markov" or d.source == "text"
  if m.vocab ~= "auto" and bytes and m.vocab < 256 then
    refuse("model.vocab", m.vocab, string.format('byte-level data (data.source = "%s") needs at least 256', d.source),
           "data.source")
  end
end

-- Parses "a.b=value" overrides into {path=, value=, text=}.
local function parse_override(arg)
  local path, text = arg:match("^([%w_%.]+)=(.*)$")
  if not path then
    error({message = string.format("command line: '%s' is not a key=value override", arg),
           status = 2, same_on_all_ranks = true}, 0)
  end
  local v
  if text == "true" then v = true
  elseif text == "false" then v = false
  elseif math.tointeger(tonumber(text)) and text:match("^[-+]?%d+$") then v = math.tointeger(tonumber(text))
  elseif tonumber(text) then v = tonumber(text)
  elseif text:match('^".*"$') or text:match("^'.*'$") then v = text:sub(2, -2)
  else v = text end
  return {path = path, value = v, text = text}
end
M.parse_override = parse_override

local function deep_copy(t)
  if type(t) ~= "table" then return t end
  local r = {}
  for k, v in pairs(t) do r[k] = deep_copy(v) end
  return r
end

-- A file the recipe reads (data, weights) named by a relative path is
-- relative to the folder of the recipe file that wrote it, wherever strata
-- runs from; one given on the command line is relative to the current
-- folder, as a shell user expects. (Outputs, run_dir and the paths under it,
-- stay relative to the current folder.) The joined path is tidied
-- lexically: "recipes/../lib*/src/*.c" becomes "lib*/src/*.c".
local function recipe_relative(dir, p)
  if p:sub(1, 1) == "/" then return p end
  local parts = {}
  for part in (dir .. "/" .. p):gmatch("[^/]+") do
    if part == ".." and #parts > 0 and parts[#parts] ~= ".." then
      parts[#parts] = nil
    elseif part ~= "." then
      parts[#parts + 1] = part
    end
  end
  local r = table.concat(parts, "/")
  if dir:sub(1, 1) == "/" then return "/" .. r end
  return r == "" and "." or r
end
M.recipe_relative = recipe_relative

local function resolve_inputs(cfg, source, overridden, paths)
  local dir = source and source:match("^(.*)/[^/]*$")
  if not dir then return end -- a recipe in the current folder (or not from a file)
  if dir == "" then dir = "/" end
  for _, path in ipairs(paths) do
    local sec, key = path:match("^(%w+)%.([%w_]+)$")
    local v = cfg[sec][key]
    if type(v) == "string" and not overridden[path] then cfg[sec][key] = recipe_relative(dir, v) end
  end
end

-- Validates a recipe table (with overrides applied) and returns the full
-- configuration with defaults. `where` = {source=, line=} of the call.
function M.validate(recipe, where, overrides)
  where = where or {}
  local overridden = {}
  local cfg = deep_copy(recipe)
  for _, o in ipairs(overrides or {}) do
    local parts = {}
    for p in o.path:gmatch("[^.]+") do parts[#parts + 1] = p end
    overridden[o.path] = o
    if #parts == 1 then
      cfg[parts[1]] = o.value
    elseif #parts == 2 then
      if cfg[parts[1]] == nil then cfg[parts[1]] = {} end
      if type(cfg[parts[1]]) ~= "table" then
        raise("command line", o.path, o.value, parts[1] .. " is not a section")
      end
      cfg[parts[1]][parts[2]] = o.value
      overridden[parts[1]] = overridden[parts[1]] or false
    else
      raise("command line", o.path, o.value, "paths have one or two parts (section.key)")
    end
  end
  local loc = locator(where.source, where.line, overridden)
  local known_top = {}
  for k in pairs(sections) do known_top[#known_top + 1] = k end
  for k in pairs(top) do known_top[#known_top + 1] = k end
  table.sort(known_top)
  local out, given = {}, {}
  for _, k in ipairs(sorted_keys(cfg)) do
    local v = cfg[k]
    if type(k) ~= "string" then
      raise(loc("experiment"), "experiment[" .. tostring(k) .. "]", v, "positional entries are not allowed; use key = value")
    elseif sections[k] then
      if type(v) ~= "table" then raise(loc(k), k, v, "expected a table (section), got " .. type(v)) end
    elseif top[k] then
      out[k] = check_value(loc, k, v, top[k])
      given[k] = true
    else
      raise(loc(k), k, v, unknown_why(k, known_top))
    end
  end
  local out_given = given
  for name, spec in pairs(sections) do
    local given = cfg[name] or {}
    local known = sorted_keys(spec)
    local sec = {}
    for _, k in ipairs(sorted_keys(given)) do
      local path = name .. "." .. tostring(k)
      if type(k) ~= "string" then
        raise(loc(name), path, given[k], "positional entries are not allowed; use key = value")
      end
      if not spec[k] then raise(loc(path), path, given[k], unknown_why(k, known)) end
      sec[k] = check_value(loc, path, given[k], spec[k])
      out_given[path] = true
    end
    for k, s in pairs(spec) do
      if sec[k] == nil and s.default ~= nil then sec[k] = s.default end
    end
    out[name] = sec
  end
  for k, s in pairs(top) do
    if out[k] == nil and s.default ~= nil then out[k] = s.default end
  end
  -- An error about `path` that a command-line setting of one of the other
  -- keys the check reads brought about (train.steps=10 against the recipe's
  -- optim.warmup = 50) names that setting as its place, and where the
  -- recipe sets `path`; otherwise the place is where `path` is set (or, for
  -- a default, the first of the others the recipe sets).
  local function refuse(path, value, why, ...)
    local others = {...}
    if not overridden[path] then
      for _, other in ipairs(others) do
        local o = overridden[other]
        if o then
          error({message = string.format("command line: %s=%s: %s = %s (%s): %s", other, o.text, path, show(value),
                                         out_given[path] and "set at " .. loc(path) or value == nil and "not set" or "its default", why),
                 status = 2, same_on_all_ranks = true}, 0)
        end
      end
    end
    local at = path
    if not out_given[path] then
      for _, other in ipairs(others) do
        if out_given[other] then at = other break end
      end
    end
    raise(loc(at), path, value, why)
  end
  if out.name:find("[/%c]") then raise(loc("name"), "name", out.name, "must not contain '/' or control characters") end
  resolve_inputs(out, where.source, overridden, {"model.init"})
  if out.model.init then -- the sizes are the file's: the recipe's give way, the command line's must agree
    local c, err = M.model_config(out.model.init)
    if not c then raise(loc("model.init"), "model.init", out.model.init, err) end
    for _, k in ipairs{"layers", "hidden", "heads", "seq", "vocab"} do
      local path = "model." .. k
      if overridden[path] and out.model[k] ~= c[k] then
        raise(loc(path), path, out.model[k], string.format("model.init '%s' holds %s = %d", out.model.init, k, c[k]))
      end
      out.model[k] = c[k]
    end
  end
  local mbs = out.parallel.microbatches -- the pipeline's name for train.accum
  if mbs then
    if out_given["train.accum"] and out.train.accum ~= mbs then
      refuse("parallel.microbatches", mbs,
             string.format("disagrees with train.accum = %d (both are the microbatches per step)", out.train.accum),
             "train.accum")
    end
    out.train.accum = mbs
  end
  check_relations(out, refuse)
  check_unread(out, loc, out_given)
  resolve_inputs(out, where.source, overridden, {"data.path", "data.val_path"})
  out.run_dir = out.run_dir or ("runs/" .. out.name)
  out.checkpoint.path = out.checkpoint.path or (out.run_dir .. "/checkpoint.h5")
  out.metrics.path = out.metrics.path or (out.run_dir .. "/metrics.h5")
  if out.metrics.plot == nil then out.metrics.plot = out.run_dir .. "/loss.png" end
  out._locate = loc
  out._refuse = refuse
  out._given = out_given -- the dotted paths the recipe or the command line set
  return out
end

-- ------------------------------------------------------------ settings

-- What a run records of its settings (the attribute "settings" of its
-- checkpoints and metrics file): a "path=value" line per key of the
-- completed configuration, sorted, less where the outputs go and how the
-- run starts (run_dir, the checkpoint, metrics and plot files,
-- train.resume, overwrite); `extra` adds derived lines (the data's sample
-- counts). A resume compares the checkpoint's with its own.
local unrecorded = {run_dir = true, overwrite = true, ["train.resume"] = true, ["checkpoint.path"] = true,
                    ["metrics.path"] = true, ["metrics.plot"] = true}

function M.settings_text(cfg, extra)
  local lines = {}
  local function add(path, v)
    if v ~= nil and not unrecorded[path] then lines[#lines + 1] = path .. "=" .. show(v):gsub("\n", "\\n") end
  end
  for k in pairs(top) do add(k, cfg[k]) end
  for name, spec in pairs(sections) do
    for k in pairs(spec) do add(name .. "." .. k, cfg[name][k]) end
  end
  for k, v in pairs(extra or {}) do add(k, v) end
  table.sort(lines)
  return table.concat(lines, "\n")
end

-- The settings that differ between two settings texts, "path old -> new"
-- each, sorted by path ("unset" for a key one of them lacks).
function M.settings_changes(old, new)
  local function parse(text)
    local t = {}
    for line in text:gmatch("[^\n]+") do
      local k, v = line:match("^([^=]+)=(.*)$")
      if k then t[k] = v end
    end
    return t
  end
  local a, b = parse(old), parse(new)
  local keys = {}
  for k in pairs(a) do keys[#keys + 1] = k end
  for k in pairs(b) do if a[k] == nil then keys[#keys + 1] = k end end
  table.sort(keys)
  local changes = {}
  for _, k in ipairs(keys) do
    if a[k] ~= b[k] then changes[#changes + 1] = string.format("%s %s -> %s", k, a[k] or "unset", b[k] or "unset") end
  end
  return changes
end
