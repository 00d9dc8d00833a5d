-- promote: move delayed jobs to waiting now: one job (ARGV[2]) or the first `count` (0 = all).
-- KEYS: delayed wait paused prioritized marker meta events
-- ARGV: [1] queue key prefix; [2] job id or ""; [3] count (when no job id)
-- Events: waiting (prev=delayed)
-- Returns: how many moved, or -1 (missing) / -3 (not delayed) for one job
--@include base groups
local function promoteOne(jobId)
  rcall("ZREM", P .. "delayed", jobId)
  rcall("HSET", P .. jobId, "delay", 0)
  toWait(jobId, "delayed")
end
local jobId = ARGV[2]
if jobId ~= "" then
  if rcall("EXISTS", P .. jobId) == 0 then return -1 end
  if not rcall("ZSCORE", P .. "delayed", jobId) then return -3 end
  promoteOne(jobId)
  return 1
end
local count = tonumber(ARGV[3])
local ids = rcall("ZRANGE", P .. "delayed", 0, count - 1)
for _, id in ipairs(ids) do promoteOne(id) end
return #ids
