-- removeJobScheduler: remove a scheduler and its pending job (unless it is running).
-- KEYS: repeat delayed wait paused prioritized completed failed waiting-children active events
-- ARGV: [1] queue key prefix; [2] scheduler id
-- Events: removed (the pending job)
-- Returns: 1 removed, 0 no such scheduler
--@include base groups jobkeys settle parent state remove
local schedulerId = ARGV[2]
local hashKey = P .. "repeat:" .. schedulerId
local current = rcall("ZSCORE", P .. "repeat", schedulerId)
if rcall("EXISTS", hashKey) == 0 and not current then return 0 end
if current then
  local jobId = "repeat:" .. schedulerId .. ":" .. current
  local state = jobState(jobId)
  if state == "delayed" or state == "waiting" or state == "prioritized" then
    removeJob(jobId, false, nowMs())
  end
end
rcall("DEL", hashKey)
rcall("ZREM", P .. "repeat", schedulerId)
return 1
