-- addJobs: add one or many jobs atomically (all of them, or none when a parent is missing).
-- KEYS: wait paused prioritized delayed marker meta events id pc waiting-children
-- ARGV: [1] queue key prefix "<prefix>:<queue>:"; [2] MessagePack array, three values per
--       job: the job's name (a job with no other add-time fields) or its meta map {name,
--       id?, ts?, delay, priority, lifo, hold, parent?, dedup?, rjk?}; data (JSON text);
--       opts (JSON text, BullMQ's compressed keys)
-- Events: added; waiting | delayed | waiting-children; duplicated; deduplicated; removed
-- Returns: {now, id1, status1, id2, status2, ...} (status 1 added, 0 existing id,
--          2 deduplicated), or {-5, index} (ErrorCode.PARENT_MISSING: nothing written)
--@include base settle add
addsOnly, metaStable, batched = true, true, true -- see base.lua
local args = cmsgpack.unpack(ARGV[2])
local count = #args / 3
local newIds, dedups = 0, false
for n = 1, count do
  local meta = args[3 * n - 2]
  if type(meta) == "string" then
    newIds = newIds + 1
  else
    if not parentExists(meta) then return {-5, n} end
    if meta.dedup then dedups = true end
    if meta.id == nil then newIds = newIds + 1 end
  end
end
if not dedups then reserveIds(newIds) end -- else each new job takes its id as it is added
local now = nowMs()
local result = {now}
for n = 1, count do
  local meta, jobId, status = args[3 * n - 2], nil, 1
  if type(meta) == "string" then
    jobId = addPlainJob(meta, args[3 * n - 1], args[3 * n], now)
  else
    jobId, status = addJob(meta, args[3 * n - 1], args[3 * n], now)
  end
  result[2 * n] = jobId
  result[2 * n + 1] = status
end
flushBatched()
return result
