-- removeJob: remove a job that is not locked (and its children unless told not to). A
-- scheduler's pending run is not removed: only removing the scheduler removes it (BullMQ's
-- removeJob refuses it too, with -8).
-- KEYS: wait paused active prioritized delayed completed failed waiting-children events repeat
-- ARGV: [1] queue key prefix; [2] job id; [3] remove children (1/0)
-- Events: removed (prev = the state it left), parents' waiting
-- Returns: 1 removed, 0 missing, active or a scheduler's pending run
--@include base groups jobkeys settle parent state remove
local jobId = ARGV[2]
local schedulerId = rcall("HGET", P .. jobId, "rjk")
if schedulerId then
  local current = rcall("ZSCORE", P .. "repeat", schedulerId)
  local state = current and jobState(jobId)
  if current and "repeat:" .. schedulerId .. ":" .. current == jobId
    and (state == "delayed" or state == "waiting" or state == "prioritized") then
    return 0
  end
end
if removeJob(jobId, ARGV[3] == "1", nowMs()) then return 1 end
return 0
