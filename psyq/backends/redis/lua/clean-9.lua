-- clean: remove up to `limit` (0 = all) jobs of a state older than a cutoff (finishedOn for
-- completed/failed, timestamp for the others), oldest first.
-- KEYS: wait paused prioritized delayed completed failed waiting-children events meta
-- ARGV: [1] queue key prefix; [2] state; [3] cutoff timestamp; [4] limit
-- Events: removed per job is not sent (BullMQ sends one cleaned event with the count)
-- Returns: the removed ids
--@include base groups jobkeys settle parent state remove
local state, cutoff, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local candidates
if state == "waiting" or state == "paused" then
  local list = "wait"
  if state == "paused" then list = "paused" end
  candidates = rcall("LRANGE", P .. list, 0, -1)
  local reversed = {}
  for i = #candidates, 1, -1 do reversed[#reversed + 1] = candidates[i] end
  candidates = reversed
  if state == "waiting" then
    for _, jobId in ipairs(groupedWaiting()) do candidates[#candidates + 1] = jobId end
  end
else
  candidates = rcall("ZRANGE", P .. state, 0, -1)
end
local stampField = "timestamp"
if state == "completed" or state == "failed" then stampField = "finishedOn" end
local removed = {}
local now = nowMs()
for _, jobId in ipairs(candidates) do
  if limit > 0 and #removed >= limit then break end
  local stamp = tonumber(rcall("HGET", P .. jobId, stampField)) or 0
  if stamp <= cutoff then
    detach(jobId, jobState(jobId))
    childRemoved(jobId, now)
    removeJobKeys(jobId)
    removed[#removed + 1] = jobId
  end
end
emit("cleaned", "count", tostring(#removed))
return removed
