-- addJobs: add one or many jobs atomically (all of them, or none when a parent is missing).
-- KEYS: wait paused prioritized delayed marker meta events id pc waiting-children
-- ARGV: [1] queue key prefix "<prefix>:<queue>:"; [2] MessagePack array, three values per
--       job: the job's name (a job with no other add-time fields), [name, group id, group
--       priority] (a job whose only other add-time field is a group without maxSize) or
--       its meta map {name, id?, ts?, delay, priority, lifo, hold, parent?, dedup?, rjk?,
--       group?}; data (JSON text); opts (JSON text, BullMQ's compressed keys)
-- Events: added; waiting | delayed | waiting-children; duplicated; deduplicated; removed
-- Returns: {now, id1, status1, id2, status2, ...} (status 1 added, 0 existing id,
--          2 deduplicated), or {-5, index} (ErrorCode.PARENT_MISSING: nothing written),
--          or {-12, index} (GROUP_MAX_SIZE: job index would pass its group's maxSize;
--          nothing written)
--@include base groups jobkeys add
addsOnly, metaStable = true, true -- see base.lua
local args = cmsgpack.unpack(ARGV[2])
local count = #args / 3

-- The index of the first job that would pass its group's maxSize, or nil: checked before
-- anything is written.
local function pastMaxSize()
  local sizes = {}
  for n = 1, count do
    if passesMaxSize(sizes, P, args[3 * n - 2]) then return n end
  end
  return nil
end
local overfull = pastMaxSize()
if overfull then return {-12, overfull} end
if count == 1 then -- a single add (the functions below are made only for a bulk)
  local meta = args[1]
  if type(meta) == "string" then
    meta = {name = meta}
  elseif meta[1] then
    meta = {name = meta[1], group = {id = meta[2], priority = meta[3]}}
  elseif not parentExists(meta) then
    return {-5, 1}
  end
  local now = nowMs()
  local jobId, status = addJob(meta, args[2], args[3], now)
  return {now, jobId, status}
end

local newIds = 0
for n = 1, count do
  local meta = args[3 * n - 2]
  if type(meta) == "string" then
    newIds = newIds + 1
  else
    if not parentExists(meta) then return {-5, n} end
    if meta.id == nil then newIds = newIds + 1 end
  end
end
-- Each job without an id of its own takes a new one in turn (a deduplicated one too, as in
-- BullMQ): they are set aside with one INCRBY.
if newIds > 0 then
  reservedLast = rcall("INCRBY", P .. "id", newIds)
  reservedNext = reservedLast - newIds + 1
end
local now = nowMs()

-- addJob for the usual job of a bulk add: a name, data and opts, no other add-time field
-- (meta {name = name}). The same writes and events in the same order, with what addJob
-- works out per job (the keys, the timestamp's text, the wait list, the marker) worked out
-- once per call, and two commands gathered for all the call's plain jobs until
-- flushPlainJobs: their LPUSHes (LPUSH k a b is LPUSH k a then LPUSH k b) and the events'
-- trim (XADD without MAXLEN, one XTRIM after: nothing reads the stream in between).
-- Grouped jobs of the short form ([name, group id, group priority]) are gathered the same
-- way: one ZADD per group and call for their lines, the group's rotation seen to once.
local plain = nil -- {events key, timestamp text, ids to push, wait list, trim's text, exact,
                  --  {group key -> {group id, priority, ids}}, group keys in order}
local function startGathering()
  if plain == nil then
    local maxLen, text = maxEvents()
    plain = {P .. "events", nowAsText(now), {}, waitKey(), text, maxLen < 1000, {}, {}}
    addBaseMarker()
  end
end

local function addPlainJob(name, data, opts)
  startGathering()
  local jobId = newJobId()
  rcall("HSET", P .. jobId, "name", name, "data", data, "opts", opts,
    "timestamp", plain[2], "delay", "0", "priority", "0")
  rcall("XADD", plain[1], "*", "event", "added", "jobId", jobId, "name", name)
  local ids = plain[3]
  ids[#ids + 1] = jobId
  rcall("XADD", plain[1], "*", "event", "waiting", "jobId", jobId)
  return jobId
end

local function addGroupedJob(head, data, opts)
  startGathering()
  local jobId = newJobId()
  local gid, priority = head[2], head[3] or 0
  if priority > 0 then
    rcall("HSET", P .. jobId, "name", head[1], "data", data, "opts", opts,
      "timestamp", plain[2], "delay", "0", "priority", "0", "gid", gid, "gpr", priority)
  else
    rcall("HSET", P .. jobId, "name", head[1], "data", data, "opts", opts,
      "timestamp", plain[2], "delay", "0", "priority", "0", "gid", gid)
  end
  rcall("XADD", plain[1], "*", "event", "added", "jobId", jobId, "name", head[1])
  rcall("XADD", plain[1], "*", "event", "waiting", "jobId", jobId)
  local key = priority .. ":" .. gid
  local line = plain[7][key]
  if line == nil then
    line = {gid, priority, {}}
    plain[7][key] = line
    plain[8][#plain[8] + 1] = key
  end
  line[3][#line[3] + 1] = jobId
  return jobId
end

-- A group's gathered jobs join the end of its line, in order: those without a group
-- priority its list (one RPUSH per 1,000), the others its ranked set (one ZADD per 500). A
-- group new to the queue (`fresh`: it had no line, no active job, no setting) has an empty
-- line and joins the rotation's end (its score set aside in `rotation`); another one has
-- its line's end read and the rotation seen to.
local function flushGroupLine(line, fresh, rotation)
  local gid, ids = line[1], line[3]
  if line[2] == 0 then
    inSlices("RPUSH", groupFifo(gid), ids)
  else
    local score = line[2] * GROUP_SPAN + GROUP_HALF
    if not fresh then score = groupScore(gid, line[2], false) end
    local high = line[2] * GROUP_SPAN + GROUP_SPAN - 1
    for first = 1, #ids, 500 do
      local members = {}
      for i = first, math.min(first + 499, #ids) do
        members[#members + 1] = math.min(high, score)
        members[#members + 1] = ids[i]
        score = score + 1
      end
      rcall("ZADD", groupLine(gid), unpack(members))
    end
  end
  if fresh then
    rotation[#rotation + 1] = nextGroupSeq()
    rotation[#rotation + 1] = gid
  else
    markGroupReady(gid)
  end
  return #ids
end

-- The call's groups into `groups` with one ZADD; which were new to the queue is known when
-- all or none were (else each is taken as known: the reads then find what a new one has).
local function flushGroupLines()
  local gids, seen = {}, {}
  for _, key in ipairs(plain[8]) do
    local gid = plain[7][key][1]
    if not seen[gid] then
      seen[gid] = true
      gids[#gids + 1] = gid
    end
  end
  if #gids == 0 then return end
  local members = {}
  for _, gid in ipairs(gids) do
    members[#members + 1] = 0
    members[#members + 1] = gid
  end
  local added = 0
  for first = 1, #members, 1000 do
    added = added + rcall("ZADD", P .. "groups", unpack(members, first, math.min(first + 999, #members)))
  end
  local allFresh = added == #gids
  local rotation, joined, grouped = {}, {}, 0
  for _, key in ipairs(plain[8]) do
    local line = plain[7][key]
    local fresh = allFresh and not joined[line[1]] -- a group's second priority: it joined
    joined[line[1]] = true
    grouped = grouped + flushGroupLine(line, fresh, rotation)
  end
  for first = 1, #rotation, 1000 do
    rcall("ZADD", P .. "groups:ready", unpack(rotation, first, math.min(first + 999, #rotation)))
  end
  countGroupWaiting(grouped)
end

-- The plain jobs' LPUSHes (one per 1,000 ids), the grouped jobs' lines and the trim: before
-- any other job (its writes go after theirs) and at the end.
local function flushPlainJobs()
  if plain == nil then return end
  local ids = plain[3]
  for first = 1, #ids, 1000 do
    rcall("LPUSH", plain[4], unpack(ids, first, math.min(first + 999, #ids)))
  end
  flushGroupLines()
  if plain[6] then
    rcall("XTRIM", plain[1], "MAXLEN", plain[5])
  else
    rcall("XTRIM", plain[1], "MAXLEN", "~", plain[5])
  end
  plain = nil
end

local result = {now}
for n = 1, count do
  local meta, jobId, status = args[3 * n - 2], nil, 1
  if type(meta) == "string" then
    jobId = addPlainJob(meta, args[3 * n - 1], args[3 * n])
  elseif meta[1] then
    jobId = addGroupedJob(meta, args[3 * n - 1], args[3 * n])
  else
    flushPlainJobs()
    jobId, status = addJob(meta, args[3 * n - 1], args[3 * n], now)
  end
  result[2 * n] = jobId
  result[2 * n + 1] = status
end
flushPlainJobs()
return result
