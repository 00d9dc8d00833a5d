-- addFlow: add job trees atomically, across queues. Parents wait in waiting-children until
-- their children finish; a child's hash links its parent (parentKey, parent).
-- KEYS: (none declared: the jobs of every queue of the flow, built from ARGV)
-- ARGV: [1] the first root's queue key prefix; then per node, in pre-order, four values:
--       queue key prefix, parent node index (0 = a root), meta JSON (see addJobs), data,
--       opts -- five values in all
-- Events: per job as addJobs (added; waiting | delayed | waiting-children)
-- Returns: {now, id1, status1, ...} in node order (status as addJobs), or {-5, n}
--          (ErrorCode.PARENT_MISSING: node n, a root, names a parent that does not exist),
--          or {-12, n} (GROUP_MAX_SIZE: node n would pass its group's maxSize, counting the
--          flow's own jobs before it); nothing written on either
--@include base groups jobkeys add
addsOnly, metaStable = true, true -- see base.lua
local sizes = {}
for i = 2, #ARGV, 5 do
  local meta = cjson.decode(ARGV[i + 2])
  if tonumber(ARGV[i + 1]) == 0 and not parentExists(meta) then
    return {-5, (i + 3) / 5}
  end
  if passesMaxSize(sizes, ARGV[i], meta) then return {-12, (i + 3) / 5} end
end
local now = nowMs()
local ids, prefixes = {}, {}
local result = {now}
for i = 2, #ARGV, 5 do
  local n = (i + 3) / 5
  local prefix, parentIndex = ARGV[i], tonumber(ARGV[i + 1])
  local meta = cjson.decode(ARGV[i + 2])
  if parentIndex > 0 then
    meta.parent = meta.parent or {}
    meta.parent.id = ids[parentIndex]
    meta.parent.queue = string.sub(prefixes[parentIndex], 1, -2)
  end
  P = prefix
  local jobId, status = addJob(meta, ARGV[i + 3], ARGV[i + 4], now)
  ids[n], prefixes[n] = jobId, prefix
  result[#result + 1] = jobId
  result[#result + 1] = status
end
return result
