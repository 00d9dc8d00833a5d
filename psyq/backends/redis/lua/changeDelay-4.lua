-- changeDelay: a delayed job becomes due `delay` ms from now.
-- KEYS: delayed marker meta events
-- ARGV: [1] queue key prefix; [2] job id; [3] delay ms
-- Events: delayed
-- Returns: 0, or -1 (missing) / -3 (not delayed)
--@include base
local jobId, delay = ARGV[2], tonumber(ARGV[3])
if rcall("EXISTS", P .. jobId) == 0 then return -1 end
if rcall("ZREM", P .. "delayed", jobId) == 0 then return -3 end
rcall("HSET", P .. jobId, "delay", delay)
delayJob(jobId, nowMs() + delay)
return 0
