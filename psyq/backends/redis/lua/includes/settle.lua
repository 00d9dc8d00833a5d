-- Settling active jobs: lock checks, retention, metrics, parents. Needs base.lua,
-- groups.lua, jobkeys.lua.
local SKIP_LOCK = "0"
local MAX_METRICS_POINTS = 60 * 24 * 7

-- Whether the queue holds cancellation marks, read once per queue and script call (only
-- cancelJob adds marks, and it never runs inside another script).
local cancelMarks = {}
local function hasCancelMarks()
  if cancelMarks[P] == nil then cancelMarks[P] = rcall("EXISTS", P .. "cancelled") == 1 end
  return cancelMarks[P]
end

-- Whether the queue's `stalled` set (the stall check's marks of active jobs) holds
-- anything, read once per queue and script call: the stall check, the only script that adds
-- marks, adds them after it took its jobs out of active. Usually it is empty.
local stalledMarks = {}
local function hasStalledMarks()
  if stalledMarks[P] == nil then stalledMarks[P] = rcall("EXISTS", P .. "stalled") == 1 end
  return stalledMarks[P]
end

-- 0 when `token` holds the lock of active job `jobId`, else an ErrorCode. A lock is only
-- taken on a job that exists and is deleted with it, so a held lock needs no EXISTS.
local function checkLock(jobId, token)
  local jobKey = P .. jobId
  local held = false
  if token ~= SKIP_LOCK then
    held = rcall("GET", jobKey .. ":lock")
    if held == token then return 0 end
  end
  if rcall("EXISTS", jobKey) == 0 then return -1 end
  if token == SKIP_LOCK then return 0 end
  if not held then return -2 end
  return -6
end

-- Take an active job out of the active list (after checkLock); -3 when it is not there.
-- `groupNoted`: the caller counts the job out of its group (finishJob's noteGroupLeft).
local function leaveActive(jobId, groupNoted)
  if rcall("LREM", P .. "active", -1, jobId) == 0 then return -3 end
  if not groupNoted then groupJobLeft(jobId) end
  rcall("DEL", P .. jobId .. ":lock")
  if hasStalledMarks() then rcall("SREM", P .. "stalled", jobId) end
  if hasCancelMarks() then rcall("HDEL", P .. "cancelled", jobId) end
  return 0
end

local function jobOpts(jobKey)
  local raw = rcall("HGET", jobKey, "opts")
  if not raw or raw == "" then return {} end
  return cjson.decode(raw)
end

-- Jobs finished per minute (BullMQ's metrics hash + data list, newest point first). A
-- script call counts its finished jobs per key and writes them once at its end
-- (flushMetrics): within one call `now` does not change, so the minute is brought up to date
-- once and the count grows by the call's jobs.
local metricsPending = {}
local function collectMetrics(kind)
  local key = P .. "metrics:" .. kind
  metricsPending[key] = (metricsPending[key] or 0) + 1
end

local function flushMetrics(now)
  for key, n in pairs(metricsPending) do
    local count = rcall("HINCRBY", key, "count", n)
    local before = count - n
    local prevTS = tonumber(rcall("HGET", key, "prevTS"))
    if not prevTS then
      rcall("HSET", key, "prevTS", now, "prevCount", 0)
    else
      local minutes = math.floor(now / 60000) - math.floor(prevTS / 60000)
      if minutes > 0 then
        local prevCount = tonumber(rcall("HGET", key, "prevCount")) or 0
        local points = {before - prevCount}
        for _ = 2, math.min(minutes, MAX_METRICS_POINTS) do points[#points + 1] = 0 end
        -- newest first: the zeros (minutes with nothing) are newer than the finished minute
        for i = #points, 1, -1 do rcall("LPUSH", key .. ":data", points[i]) end
        rcall("LTRIM", key .. ":data", 0, MAX_METRICS_POINTS - 1)
        rcall("HSET", key, "prevTS", now, "prevCount", before)
      end
    end
  end
  metricsPending = {}
end

local function dropOldest(target, keepCount)
  local doomed = rcall("ZRANGE", target, 0, -(keepCount + 1))
  for _, jobId in ipairs(doomed) do
    rcall("ZREM", target, jobId)
    removeJobKeys(jobId)
  end
end

local function dropOlder(target, cutoff, limit)
  local doomed = rcall("ZRANGEBYSCORE", target, "-inf", "(" .. cutoff, "LIMIT", 0, limit)
  for _, jobId in ipairs(doomed) do
    rcall("ZREM", target, jobId)
    removeJobKeys(jobId)
  end
end

-- removeOnComplete / removeOnFail: true, N, or {age (s), count, limit}.
local function retain(target, keep, jobId, now)
  if keep == nil or keep == false then return end
  if keep == true then
    rcall("ZREM", target, jobId)
    removeJobKeys(jobId)
  elseif type(keep) == "number" then
    dropOldest(target, keep)
  elseif type(keep) == "table" then
    if keep.count ~= nil then dropOldest(target, keep.count) end
    if keep.age ~= nil then dropOlder(target, now - keep.age * 1000, keep.limit or 1000) end
  end
end
