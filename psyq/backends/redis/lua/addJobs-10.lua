-- addJobs: add one or many jobs atomically (all of them, or none when a parent is missing).
-- KEYS: wait paused prioritized delayed marker meta events id pc waiting-children
-- ARGV: [1] queue key prefix "<prefix>:<queue>:"; then per job three values:
--       meta JSON {name, id?, ts?, delay, priority, lifo, hold, parent?, dedup?, rjk?},
--       data (JSON text), opts (JSON text, BullMQ's compressed keys)
-- Events: added; waiting | delayed | waiting-children; duplicated; deduplicated; removed
-- Returns: {now, id1, status1, id2, status2, ...} (status 1 added, 0 existing id,
--          2 deduplicated), or {-5, index} (ErrorCode.PARENT_MISSING: nothing written)
--@include base settle add
addsOnly, metaStable = true, true -- see base.lua
local now = nowMs()
local metas = {}
for i = 2, #ARGV, 3 do
  local meta = cjson.decode(ARGV[i])
  if not parentExists(meta) then return {-5, (i + 1) / 3} end
  metas[#metas + 1] = meta
end
local result = {now}
for n, meta in ipairs(metas) do
  local i = 2 + (n - 1) * 3
  local jobId, status = addJob(meta, ARGV[i + 1], ARGV[i + 2], now)
  result[#result + 1] = jobId
  result[#result + 1] = status
end
return result
