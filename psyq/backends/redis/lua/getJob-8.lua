-- getJob: a job's hash and its state, read together.
-- KEYS: wait paused active prioritized delayed completed failed waiting-children
-- ARGV: [1] queue key prefix; [2] job id
-- Events: none
-- Returns: {} when missing, else the flat hash followed by "__state", state
--@include base groups state
local jobId = ARGV[2]
local fields = rcall("HGETALL", P .. jobId)
if #fields == 0 then return {} end
fields[#fields + 1] = "__state"
fields[#fields + 1] = jobState(jobId)
return fields
