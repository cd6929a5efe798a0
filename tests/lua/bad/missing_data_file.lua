-- expect: 1 data file '/nonexistent/strata/corpus.txt': No such file or directory
local strata = require "strata"
strata.experiment{
  data = {source = "text", path = "/nonexistent/strata/corpus.txt"},
}
