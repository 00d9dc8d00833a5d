-- moveToWaitingChildren: an active job (held with the token) waits for children it has
-- added, when some are still pending; no attempt is counted.
-- KEYS: active waiting-children stalled events
-- ARGV: [1] queue key prefix; [2] job id; [3] token
-- Events: waiting-children
--          A job whose children all finished while it ran (it added them, and they were
--          quicker than this call) goes straight back to waiting, to run again with their
--          results, instead of racing its own children.
-- Returns: 1 moved, 0 no pending children (the job stays active), or -1 / -2 / -6 / -3
--@include base groups jobkeys settle
local jobId = ARGV[2]

-- Did a child of this job finish since the job became active? Strictly after: a child
-- that moved its parent to waiting in the millisecond the parent was taken again finished
-- before this run.
local function childFinishedWhileActive()
  local since = tonumber(rcall("HGET", P .. jobId, "processedOn")) or 0
  for _, childKey in ipairs(rcall("HKEYS", P .. jobId .. ":processed")) do
    if (tonumber(rcall("HGET", childKey, "finishedOn")) or 0) > since then return true end
  end
  return false
end

local code = checkLock(jobId, ARGV[3])
if code ~= 0 then return code end
local pending = rcall("SCARD", P .. jobId .. ":dependencies") > 0
if not pending and not childFinishedWhileActive() then return 0 end
code = leaveActive(jobId)
if code ~= 0 then return code end
if pending then
  rcall("ZADD", P .. "waiting-children", nowMs(), jobId)
  emit("waiting-children", "jobId", jobId, "prev", "active")
else
  toWait(jobId, "waiting-children")
end
return 1
