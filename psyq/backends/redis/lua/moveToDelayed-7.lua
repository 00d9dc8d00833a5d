-- moveToDelayed: an active job (held with the token, "0" = any) waits until a time; no
-- attempt is counted.
-- KEYS: active delayed marker meta events stalled wait
-- ARGV: [1] queue key prefix; [2] job id; [3] due timestamp ms; [4] token
-- Events: delayed (delay = the absolute due time)
-- Returns: 0, or -1 missing / -2 lock missing / -6 lock mismatch / -3 not active
--@include base groups jobkeys settle
local jobId, due = ARGV[2], tonumber(ARGV[3])
local code = checkLock(jobId, ARGV[4])
if code == 0 then code = leaveActive(jobId) end
if code ~= 0 then return code end
rcall("HSET", P .. jobId, "delay", math.max(0, due - nowMs()))
delayJob(jobId, due)
return 0
