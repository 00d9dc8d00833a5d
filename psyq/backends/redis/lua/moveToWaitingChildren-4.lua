-- moveToWaitingChildren: an active job (held with the token) waits for children it has
-- added, when some are still pending; no attempt is counted.
-- KEYS: active waiting-children stalled events
-- ARGV: [1] queue key prefix; [2] job id; [3] token
-- Events: waiting-children
-- Returns: 1 moved, 0 no pending children (the job stays active), or -1 / -2 / -6 / -3
--@include base settle
local jobId = ARGV[2]
local code = checkLock(jobId, ARGV[3])
if code ~= 0 then return code end
if rcall("SCARD", P .. jobId .. ":dependencies") == 0 then return 0 end
code = leaveActive(jobId)
if code ~= 0 then return code end
rcall("ZADD", P .. "waiting-children", nowMs(), jobId)
emit("waiting-children", "jobId", jobId, "prev", "active")
return 1
