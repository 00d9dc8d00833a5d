-- Groups (BullMQ Pro's `group: {id}`): each group's waiting jobs in a line of their own,
-- outside wait/prioritized (so a plain BullMQ take never sees them), and a rotation of the
-- groups that can be served. Needs base.lua. Keys, all under the queue's prefix P (so they
-- keep its hash tag):
--   groups            ZSET, score 0: every group with waiting or active jobs or settings, by id
--   groups:ready      ZSET: groups that may be served, by a rising sequence (lowest next)
--   groups:limited    ZSET: groups whose rate limit window is full, by the ms it ends
--   groups:active     HASH: group id -> its active jobs (no field at 0)
--   groups:waiting    STRING: waiting jobs of all the groups together (none at 0)
--   group:<id>        ZSET: the group's waiting jobs, score priority * 2^32 + sequence
-- Sequences follow the highest score there (no counter key: an emptied queue of groups
-- keeps nothing).
--   group-opts:<id>   HASH: the group's own settings (concurrency, max, duration, paused)
--   group-limiter:<id> STRING: starts in the group's window, expiring with it
-- A job of a group carries the hash fields gid (its group) and gpr (its group priority).
local GROUP_SPAN = 0x100000000 -- score = priority * 2^32 + sequence
local GROUP_HALF = 0x80000000 -- the tail's sequences; the head's go below
local GROUP_MANUAL = 9007199254740991 -- rate_limit_group(ms) fills the window with this

local function groupLine(gid) return P .. "group:" .. gid end
local function groupLimiter(gid) return P .. "group-limiter:" .. gid end

-- A group's own settings, read once per group and script call (only the groups control
-- script changes them, and it reads none through here).
local groupOptsCache = {}
local function groupOpts(gid)
  local key = P .. "group-opts:" .. gid
  local entry = groupOptsCache[key]
  if entry == nil then
    local v = rcall("HMGET", key, "concurrency", "max", "duration", "paused")
    entry = {concurrency = tonumber(v[1]), max = tonumber(v[2]), duration = tonumber(v[3]),
      paused = v[4] ~= false}
    groupOptsCache[key] = entry
  end
  return entry
end

local function groupActive(gid)
  return tonumber(rcall("HGET", P .. "groups:active", gid)) or 0
end

-- The rotation's next score: after the last group in it, read once per queue and script
-- call (every ZADD to groups:ready takes its score here).
local lastGroupSeq = {}
local function nextGroupSeq()
  local last = lastGroupSeq[P]
  if last == nil then
    local found = rcall("ZRANGE", P .. "groups:ready", -1, -1, "WITHSCORES")
    last = tonumber(found[2]) or 0
  end
  lastGroupSeq[P] = last + 1
  return last + 1
end

-- The group joins the rotation (at its end) unless it is there, paused, limited or at its
-- own concurrency; a worker's limits are checked where a job is taken.
local function markGroupReady(gid)
  if rcall("ZSCORE", P .. "groups:ready", gid) then return end
  local opts = groupOpts(gid)
  if opts.paused or rcall("ZSCORE", P .. "groups:limited", gid) then return end
  if opts.concurrency ~= nil and groupActive(gid) >= opts.concurrency then return end
  rcall("ZADD", P .. "groups:ready", nextGroupSeq(), gid)
  addBaseMarker()
end

-- A group with no waiting or active job and no settings keeps nothing.
local function forgetGroupIfEmpty(gid)
  if rcall("EXISTS", groupLine(gid)) == 1 then return end
  if rcall("HEXISTS", P .. "groups:active", gid) == 1 then return end
  rcall("ZREM", P .. "groups:ready", gid)
  rcall("ZREM", P .. "groups:limited", gid)
  if rcall("EXISTS", P .. "group-opts:" .. gid) == 1 then return end
  rcall("ZREM", P .. "groups", gid)
end

local function countGroupWaiting(n)
  local left = rcall("INCRBY", P .. "groups:waiting", n)
  if left <= 0 then rcall("DEL", P .. "groups:waiting") end
end

-- The score of a job joining its group's line: at the end of its priority, or (`front`) at
-- the head of it (a job handed back or stalled).
local function groupScore(gid, priority, front)
  local low = priority * GROUP_SPAN
  local high = low + GROUP_SPAN - 1
  if front then
    local first = rcall("ZRANGEBYSCORE", groupLine(gid), low, high, "WITHSCORES", "LIMIT", 0, 1)
    if first[2] then return math.max(low, tonumber(first[2]) - 1) end
  else
    local last = rcall("ZREVRANGEBYSCORE", groupLine(gid), high, low, "WITHSCORES", "LIMIT", 0, 1)
    if last[2] then return math.min(high, tonumber(last[2]) + 1) end
  end
  return low + GROUP_HALF
end

enqueueGrouped = function(jobId, gid, priority, front) -- declared in base.lua
  rcall("ZADD", groupLine(gid), groupScore(gid, priority, front), jobId)
  countGroupWaiting(1)
  rcall("ZADD", P .. "groups", 0, gid)
  markGroupReady(gid)
end

-- A job that left active (settled, delayed, stalled, handed back): its group's count, and
-- the group back in the rotation when it has work (it is there already, usually).
local function groupJobLeft(jobId)
  local gid = rcall("HGET", P .. jobId, "gid")
  if not gid then return end
  local left = rcall("HINCRBY", P .. "groups:active", gid, -1)
  if left <= 0 then
    rcall("HDEL", P .. "groups:active", gid)
    if rcall("EXISTS", groupLine(gid)) == 0 then return forgetGroupIfEmpty(gid) end
  end
  if rcall("ZSCORE", P .. "groups:ready", gid) then return end
  if rcall("EXISTS", groupLine(gid)) == 1 then markGroupReady(gid) end
end

-- A waiting job of a group taken out of its line (removed, cleaned); false when it was not
-- in one.
local function groupDetach(jobId)
  local gid = rcall("HGET", P .. jobId, "gid")
  if not gid or rcall("ZREM", groupLine(gid), jobId) == 0 then return false end
  countGroupWaiting(-1)
  forgetGroupIfEmpty(gid)
  return true
end

local function groupHolds(jobId)
  local gid = rcall("HGET", P .. jobId, "gid")
  return gid ~= false and rcall("ZSCORE", groupLine(gid), jobId) ~= false
end

-- Limited groups whose window ended join the rotation again.
local function releaseLimitedGroups(now)
  local due = rcall("ZRANGEBYSCORE", P .. "groups:limited", "-inf", now, "LIMIT", 0, 1000)
  for _, gid in ipairs(due) do
    rcall("ZREM", P .. "groups:limited", gid)
    if rcall("EXISTS", groupLine(gid)) == 1 then markGroupReady(gid) end
  end
end

local function parkGroup(gid, untilMs)
  rcall("ZREM", P .. "groups:ready", gid)
  rcall("ZADD", P .. "groups:limited", untilMs, gid)
end

-- The group's limits for this take: its own, else the worker's (req.gconc, req.gmax,
-- req.gduration).
local function groupLimits(gid, req)
  local opts = groupOpts(gid)
  local max, duration = req.gmax, req.gduration
  if opts.max ~= nil then max, duration = opts.max, opts.duration end
  return opts.concurrency or req.gconc, max, duration
end

-- Whether the group may start a job now; when not, it leaves the rotation (full: until one
-- of its jobs leaves active; limited: until its window ends). Without a limit the window is
-- not read: rate_limit_group(ms) parks the group in groups:limited for those ms.
local function groupOpen(gid, concurrency, max, now)
  if groupOpts(gid).paused then
    rcall("ZREM", P .. "groups:ready", gid)
    return false
  end
  if concurrency ~= nil and groupActive(gid) >= concurrency then
    rcall("ZREM", P .. "groups:ready", gid)
    return false
  end
  if max == nil then return true end
  local ttl = rcall("PTTL", groupLimiter(gid))
  if ttl > 0 and (tonumber(rcall("GET", groupLimiter(gid))) or 0) >= max then
    parkGroup(gid, now + ttl)
    return false
  end
  return true
end

-- One start counted in the group's window; true when the window is now full.
local function countGroupStart(gid, max, duration)
  if max == nil then return false end
  local key = groupLimiter(gid)
  local used = 1
  if rcall("PTTL", key) > 0 then
    used = rcall("INCR", key)
  else
    rcall("SET", key, 1, "PX", duration)
  end
  return used >= max
end

-- After a start: the group goes to the end of the rotation, or leaves it (full, limited).
-- An emptied group stays until a take finds its line empty or its last active job leaves
-- (groupJobLeft): that saves a read per start.
local function rotateGroup(gid, active, concurrency, windowFull, now)
  if windowFull then
    parkGroup(gid, now + math.max(1, rcall("PTTL", groupLimiter(gid))))
  elseif concurrency ~= nil and active >= concurrency then
    rcall("ZREM", P .. "groups:ready", gid)
  else
    rcall("ZADD", P .. "groups:ready", nextGroupSeq(), gid)
  end
end

-- Grouped jobs taken in this script call: groups:waiting is lowered once, by
-- flushGroupTakes, at the end of the take.
local groupTakes = 0
local function flushGroupTakes()
  if groupTakes > 0 then
    countGroupWaiting(-groupTakes)
    groupTakes = 0
  end
end

-- The next job of the rotation moved to active (its group's count with it), or nil. Each
-- group passed over leaves the rotation, so the loop ends.
local function nextGrouped(req, now)
  while true do
    local gid = rcall("ZRANGE", P .. "groups:ready", 0, 0)[1]
    if gid == nil then return nil end
    local concurrency, max, duration = groupLimits(gid, req)
    if groupOpen(gid, concurrency, max, now) then
      local jobId = rcall("ZPOPMIN", groupLine(gid))[1]
      if jobId then
        groupTakes = groupTakes + 1
        rcall("LPUSH", P .. "active", jobId)
        local active = rcall("HINCRBY", P .. "groups:active", gid, 1)
        rotateGroup(gid, active, concurrency, countGroupStart(gid, max, duration), now)
        return jobId
      end
      rcall("ZREM", P .. "groups:ready", gid) -- an emptied group (rotateGroup)
      forgetGroupIfEmpty(gid)
    end
  end
end

-- The ms until a limited group's window ends, or nil when none is limited.
local function nextGroupRelease(now)
  local first = rcall("ZRANGE", P .. "groups:limited", 0, 0, "WITHSCORES")
  if first[2] then return math.max(1, tonumber(first[2]) - now) end
  return nil
end

-- The waiting jobs of every group, group by group (clean, drain).
local function groupedWaiting()
  local ids = {}
  for _, gid in ipairs(rcall("ZRANGE", P .. "groups", 0, -1)) do
    for _, jobId in ipairs(rcall("ZRANGE", groupLine(gid), 0, -1)) do ids[#ids + 1] = jobId end
  end
  return ids
end

-- Every group's line emptied (drain): `drop(ids)` deletes the jobs; the groups keep their
-- settings and active counts.
local function emptyGroupLines(drop)
  for _, gid in ipairs(rcall("ZRANGE", P .. "groups", 0, -1)) do
    drop(rcall("ZRANGE", groupLine(gid), 0, -1))
    rcall("DEL", groupLine(gid))
    forgetGroupIfEmpty(gid)
  end
  rcall("DEL", P .. "groups:waiting", P .. "groups:ready")
end

-- Up to `budget` waiting jobs of the groups removed with `drop(ids)` (obliterate); how many.
-- Once none is left, every group key goes.
local function obliterateGroups(drop, budget)
  local dropped = 0
  for _, gid in ipairs(rcall("ZRANGE", P .. "groups", 0, -1)) do
    if dropped >= budget then return dropped end
    local ids = rcall("ZRANGE", groupLine(gid), 0, budget - dropped - 1)
    if #ids > 0 then
      drop(ids)
      rcall("ZREM", groupLine(gid), unpack(ids))
      dropped = dropped + #ids
    end
  end
  if dropped >= budget then return dropped end
  for _, gid in ipairs(rcall("ZRANGE", P .. "groups", 0, -1)) do
    rcall("DEL", groupLine(gid), P .. "group-opts:" .. gid, groupLimiter(gid))
  end
  rcall("DEL", P .. "groups", P .. "groups:ready", P .. "groups:limited", P .. "groups:active",
    P .. "groups:waiting")
  return dropped
end
