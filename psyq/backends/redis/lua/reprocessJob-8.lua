-- reprocessJob: completed or failed jobs go back to waiting: one job (ARGV[3]) or those
-- finished at or before ARGV[4] (up to ARGV[5], 0 = all).
-- KEYS: completed failed wait paused prioritized marker meta events
-- ARGV: [1] queue key prefix; [2] state (completed|failed); [3] job id or "";
--       [4] finished-before timestamp; [5] count; [6] 1: attemptsMade back to 0 (one job);
--       [7] 1: attemptsStarted back to 0 (one job)
-- Events: waiting (prev=completed|failed)
-- Returns: how many moved, or -1 (missing) / -3 (not in that state) for one job
--@include base groups
local state = ARGV[2]
local function reprocess(jobId)
  rcall("ZREM", P .. state, jobId)
  local result = "returnvalue"
  if state == "failed" then result = "failedReason" end
  rcall("HDEL", P .. jobId, "finishedOn", "processedOn", result)
  toWait(jobId, state)
end
local jobId = ARGV[3]
if jobId ~= "" then
  if rcall("EXISTS", P .. jobId) == 0 then return -1 end
  if not rcall("ZSCORE", P .. state, jobId) then return -3 end
  if ARGV[6] == "1" then rcall("HSET", P .. jobId, "atm", 0) end
  if ARGV[7] == "1" then rcall("HSET", P .. jobId, "ats", 0) end
  reprocess(jobId)
  return 1
end
local count = tonumber(ARGV[5])
local ids
if count > 0 then
  ids = rcall("ZRANGEBYSCORE", P .. state, "-inf", ARGV[4], "LIMIT", 0, count)
else
  ids = rcall("ZRANGEBYSCORE", P .. state, "-inf", ARGV[4])
end
for _, id in ipairs(ids) do reprocess(id) end
return #ids
