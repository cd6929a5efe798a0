-- expect: 2 markov_with_path.lua:4: data.path = "corpus.txt": not used by data.source = "markov"
local strata = require "strata"
strata.experiment{
  data = {source = "markov", path = "corpus.txt"},
}
