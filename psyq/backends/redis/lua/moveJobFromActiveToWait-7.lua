-- moveJobFromActiveToWait: hand an active job back, next in line, without counting an
-- attempt made (rate limit, forced close); its start (ats) stays counted, as in BullMQ.
-- KEYS: active wait paused prioritized marker meta events
-- ARGV: [1] queue key prefix; [2] job id; [3] token
-- Events: waiting (prev=active)
-- Returns: 0, or -1 / -2 / -6 / -3
--@include base groups jobkeys settle
local jobId = ARGV[2]
local code = checkLock(jobId, ARGV[3])
if code == 0 then code = leaveActive(jobId) end
if code ~= 0 then return code end
toWait(jobId, "active", true)
return 0
