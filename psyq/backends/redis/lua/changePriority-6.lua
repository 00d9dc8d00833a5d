-- changePriority: set a job's priority; a waiting or prioritized job moves to its new line.
-- KEYS: wait paused prioritized marker meta pc
-- ARGV: [1] queue key prefix; [2] job id; [3] priority; [4] lifo (1/0)
-- Events: none
-- Returns: 0, or -1 (job missing)
--@include base groups jobkeys settle
local jobId, priority = ARGV[2], tonumber(ARGV[3])
local jobKey = P .. jobId
if rcall("EXISTS", jobKey) == 0 then return -1 end
local opts = jobOpts(jobKey)
opts.priority = priority
rcall("HSET", jobKey, "priority", priority, "opts", cjson.encode(opts))
local queued = rcall("LREM", P .. "wait", 0, jobId) + rcall("LREM", P .. "paused", 0, jobId)
  + rcall("ZREM", P .. "prioritized", jobId)
if queued > 0 then enqueue(jobId, priority, ARGV[4] == "1") end
return 0
