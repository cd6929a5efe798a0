-- expect: 2 pipeline_unread.lua:4: parallel.schedule = "gpipe": not used with parallel.pp = 1 (no pipeline)
local strata = require "strata"
strata.experiment{
  parallel = {schedule = "gpipe"},
}
