-- expect: 2 unread_markov_key.lua:4: data.fanout = 4: not used with data.source = "text" (it shapes the generated Markov corpus)
local strata = require "strata"
strata.experiment{
  data = {source = "text", path = "corpus.txt", fanout = 4},
}
