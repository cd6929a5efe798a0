-- expect: 2 plan_search_unknown_key.lua:4: plan_search: unknown key 'globalbatch' (keys: model, cluster, params, global_batch,
-- A misspelled option of strata.plan_search is an error, not ignored.
local strata = require "strata"
strata.plan_search{model = {layers = 2, hidden = 64, heads = 4, seq = 64, vocab = 256},
                   cluster = "dgx-a100-80gb", globalbatch = 64, print = false}
