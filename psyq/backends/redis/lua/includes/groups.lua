-- Groups (BullMQ Pro's `group: {id}`): each group's waiting jobs in a line of their own,
-- outside wait/prioritized (so a plain BullMQ take never sees them), and a rotation of the
-- groups that can be served. Needs base.lua. Keys, all under the queue's prefix P (so they
-- keep its hash tag):
--   groups            ZSET, score 0: every group with waiting or active jobs or settings, by id
--   groups:ready      ZSET: groups that may be served, by a rising sequence (lowest next)
--   groups:limited    ZSET: groups whose rate limit window is full, by the ms it ends
--   groups:full       SET: groups out of the rotation at a concurrency (their own or a
--                     worker's), back in when one of their jobs leaves active
--   groups:active     HASH: group id -> its active jobs (no field at 0)
--   groups:waiting    STRING: waiting jobs of all the groups together (none at 0)
--   group-fifo:<id>   LIST: the group's waiting jobs without a group priority, oldest first
--   group:<id>        ZSET: its waiting jobs with a group priority, score priority * 2^32 +
--                     sequence; sequences follow the highest score there (no counter key:
--                     an emptied queue of groups keeps nothing)
--   group-opts:<id>   HASH: the group's own settings (concurrency, max, duration, paused)
--   group-limiter:<id> STRING: starts in the group's window, expiring with it
-- A job of a group carries the hash fields gid (its group) and gpr (its group priority).
-- The list and the set make the group's line: the list's jobs first (priority 0), then the
-- set's by score. Most jobs have no group priority, and a list costs less than a sorted set
-- to push to, to pop from and to keep (a set of more than 128 jobs is a skiplist). A store
-- written before the list existed may hold jobs of priority 0 in the set: they come after
-- the list's.
local GROUP_SPAN = 0x100000000 -- score = priority * 2^32 + sequence
local GROUP_HALF = 0x80000000 -- the tail's sequences; the head's go below
local GROUP_MANUAL = 9007199254740991 -- rate_limit_group(ms) fills the window with this

-- A count as redis.call's argument: -1 to 9 (most of a group's counts and indexes) as a
-- string made without sprintf, which Lua formats a number argument with (thousands of
-- instructions a call).
local function count(n)
  if n == -1 then return "-1" end
  if n >= 0 and n <= 9 and n % 1 == 0 then return string.char(48 + n) end
  return n
end

local function groupLine(gid) return P .. "group:" .. gid end -- the ranked part
local function groupFifo(gid) return P .. "group-fifo:" .. gid end
local function groupLimiter(gid) return P .. "group-limiter:" .. gid end

-- Whether adding the job of `meta` (an add script's header) to the queue of `prefix` would
-- pass its group's maxSize, counting the group's waiting jobs and this call's own before it
-- (`sizes`, by line key, updated). A held, delayed or already existing job is not counted.
local function passesMaxSize(sizes, prefix, meta)
  local group = type(meta) == "table" and meta.group
  if not (group and group.maxSize) or meta.hold or (meta.delay or 0) ~= 0
      or (meta.id and rcall("EXISTS", prefix .. meta.id) == 1) then
    return false
  end
  local line = prefix .. "group:" .. group.id
  local size = (sizes[line] or rcall("ZCARD", line)
    + rcall("LLEN", prefix .. "group-fifo:" .. group.id)) + 1
  sizes[line] = size
  return size > group.maxSize
end

-- `command key member...` for every member of `list`, 1,000 to a call (unpack's stack).
local function inSlices(command, key, list)
  for first = 1, #list, 1000 do
    rcall(command, key, unpack(list, first, math.min(first + 999, #list)))
  end
end

-- Which of `keys` exist (a list of booleans): one EXISTS for them all, and one per key only
-- when some exist and some do not.
local function existing(keys)
  local present = 0
  for first = 1, #keys, 1000 do
    present = present + rcall("EXISTS", unpack(keys, first, math.min(first + 999, #keys)))
  end
  local found = {}
  for i = 1, #keys do
    if present == 0 then found[i] = false
    elseif present == #keys then found[i] = true
    else found[i] = rcall("EXISTS", keys[i]) == 1 end
  end
  return found
end

-- A group's own settings, read once per group and script call (only the groups control
-- script changes them, and it reads none through here).
local groupOptsCache = {}
local NO_GROUP_OPTS = {paused = false} -- a group without settings of its own (read only)
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

-- The settings of several groups about to be read: one EXISTS tells which have any (most
-- groups have none), so only those are read.
local function loadGroupOpts(gids)
  local keys = {}
  for _, gid in ipairs(gids) do
    local key = P .. "group-opts:" .. gid
    if groupOptsCache[key] == nil then keys[#keys + 1] = key end
  end
  if #keys < 2 then return end -- one HMGET, as groupOpts reads it
  for i, own in ipairs(existing(keys)) do
    if not own then groupOptsCache[keys[i]] = NO_GROUP_OPTS end
  end
end

local function groupActive(gid)
  return tonumber(rcall("HGET", P .. "groups:active", gid)) or 0
end

-- Whether the group has a waiting job (either part of its line).
local function hasLine(gid)
  return rcall("EXISTS", groupFifo(gid), groupLine(gid)) > 0
end

-- {gid = whether it has a waiting job} for `gids`: which lists exist (existing), then
-- which sets, for the groups without a list.
local function linesHeld(gids)
  local fifos = {}
  for i, gid in ipairs(gids) do fifos[i] = groupFifo(gid) end
  local held, rest, sets = {}, {}, {}
  for i, found in ipairs(existing(fifos)) do
    held[gids[i]] = found
    if not found then
      rest[#rest + 1] = gids[i]
      sets[#sets + 1] = groupLine(gids[i])
    end
  end
  for i, found in ipairs(existing(sets)) do held[rest[i]] = found end
  return held
end

-- Up to `n` of the group's waiting jobs taken out of its line, in its order (the list's,
-- then the set's). LPOP with a count needs Redis 6.2; older servers read and trim.
local function popLine(gid, n)
  local fifo = groupFifo(gid)
  local ids
  if n == 1 then
    ids = {rcall("LPOP", fifo)}
    if not ids[1] then ids = {} end
  else
    ids = redis.pcall("LPOP", fifo, n)
  end
  if type(ids) == "table" and ids.err then
    ids = rcall("LRANGE", fifo, 0, n - 1)
    if #ids > 0 then rcall("LTRIM", fifo, #ids, -1) end
  elseif not ids then
    ids = {}
  end
  if #ids < n then
    local ranked = rcall("ZPOPMIN", groupLine(gid), count(n - #ids))
    for i = 1, #ranked, 2 do ids[#ids + 1] = ranked[i] end
  end
  return ids
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
-- own concurrency (then it waits in groups:full); a worker's limits are checked where a job
-- is taken.
local function markGroupReady(gid)
  if rcall("ZSCORE", P .. "groups:ready", gid) then return end
  local opts = groupOpts(gid)
  if opts.paused or rcall("ZSCORE", P .. "groups:limited", gid) then return end
  if opts.concurrency ~= nil and groupActive(gid) >= opts.concurrency then
    rcall("SADD", P .. "groups:full", gid)
    return
  end
  rcall("ZADD", P .. "groups:ready", nextGroupSeq(), gid)
  addBaseMarker()
end

-- A group with no waiting or active job and no settings keeps nothing.
local function forgetGroupIfEmpty(gid)
  if hasLine(gid) then return end
  if rcall("HEXISTS", P .. "groups:active", gid) == 1 then return end
  rcall("ZREM", P .. "groups:ready", gid)
  rcall("ZREM", P .. "groups:limited", gid)
  rcall("SREM", P .. "groups:full", gid)
  if rcall("EXISTS", P .. "group-opts:" .. gid) == 1 then return end
  rcall("ZREM", P .. "groups", gid)
end

-- forgetGroupIfEmpty for groups known to have neither waiting nor active jobs, together
-- (`anyFull` false: groups:full is known empty).
local function forgetGroups(gids, anyFull)
  if #gids == 0 then return end
  inSlices("ZREM", P .. "groups:ready", gids)
  inSlices("ZREM", P .. "groups:limited", gids)
  if anyFull ~= false then inSlices("SREM", P .. "groups:full", gids) end
  local keys = {}
  for i, gid in ipairs(gids) do keys[i] = P .. "group-opts:" .. gid end
  local bare = {}
  for i, own in ipairs(existing(keys)) do
    if not own then bare[#bare + 1] = gids[i] end
  end
  inSlices("ZREM", P .. "groups", bare)
end

local function countGroupWaiting(n)
  local left = rcall("INCRBY", P .. "groups:waiting", count(n))
  if left <= 0 then rcall("DEL", P .. "groups:waiting") end
end

-- The score of a job joining its group's ranked line (a group priority above 0): at the
-- end of its priority, or (`front`) at the head of it (a job handed back or stalled).
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

-- A group new to the queue (not in `groups`: no line, no active job, no setting, so neither
-- paused, limited nor full) has an empty line and joins the rotation's end at once.
enqueueGrouped = function(jobId, gid, priority, front) -- declared in base.lua
  local fresh = rcall("ZADD", P .. "groups", "0", gid) == 1
  if priority == 0 then
    rcall(front and "LPUSH" or "RPUSH", groupFifo(gid), jobId)
  elseif fresh then
    rcall("ZADD", groupLine(gid), priority * GROUP_SPAN + GROUP_HALF, jobId)
  else
    rcall("ZADD", groupLine(gid), groupScore(gid, priority, front), jobId)
  end
  countGroupWaiting(1)
  if fresh then
    rcall("ZADD", P .. "groups:ready", nextGroupSeq(), gid)
    addBaseMarker()
  else
    markGroupReady(gid)
  end
end

-- `n` jobs of group `gid` left active (settled, delayed, stalled, handed back): its count,
-- and the group back in the rotation when it left it at a concurrency and has work.
local function groupLeft(gid, n)
  local left = rcall("HINCRBY", P .. "groups:active", gid, count(-n))
  if left <= 0 then
    rcall("HDEL", P .. "groups:active", gid)
    if not hasLine(gid) then return forgetGroupIfEmpty(gid) end
  end
  if rcall("SREM", P .. "groups:full", gid) == 1 and hasLine(gid) then
    markGroupReady(gid)
  end
end

local function groupJobLeft(jobId)
  local gid = rcall("HGET", P .. jobId, "gid")
  if gid then groupLeft(gid, 1) end
end

-- Jobs that left active in a settle call, counted per group (noteGroupLeft) and written
-- once per group by flushGroupLeaves, before anything reads the counts (the fetch).
local leftCounts, leftOrder = {}, {}
local function noteGroupLeft(gid)
  local n = leftCounts[gid]
  if n == nil then leftOrder[#leftOrder + 1] = gid end
  leftCounts[gid] = (n or 0) + 1
end

local function flushGroupLeaves()
  if #leftOrder == 0 then return end
  local order, counts = leftOrder, leftCounts
  leftOrder, leftCounts = {}, {}
  local idle = {} -- groups left without an active job
  for _, gid in ipairs(order) do
    if rcall("HINCRBY", P .. "groups:active", gid, count(-counts[gid])) <= 0 then
      idle[#idle + 1] = gid
    end
  end
  local waitingIn = {} -- idle group -> whether its line holds jobs
  if #idle > 0 then
    inSlices("HDEL", P .. "groups:active", idle)
    waitingIn = linesHeld(idle)
  end
  local anyFull = rcall("EXISTS", P .. "groups:full") == 1
  local emptied = {}
  for _, gid in ipairs(order) do -- in the settles' order, as settles of one job each
    local waiting = waitingIn[gid]
    if waiting == false then
      emptied[#emptied + 1] = gid
    elseif anyFull and rcall("SREM", P .. "groups:full", gid) == 1
        and (waiting or hasLine(gid)) then
      markGroupReady(gid)
    end
  end
  forgetGroups(emptied, anyFull)
end

-- A waiting job of a group taken out of its line (removed, cleaned); false when it was not
-- in one. A job with a group priority is in the set; one without, in the list (or, written
-- before the list existed, in the set).
local function groupDetach(jobId)
  local v = rcall("HMGET", P .. jobId, "gid", "gpr")
  local gid = v[1]
  if not gid then return false end
  local removed = 0
  if not v[2] then removed = rcall("LREM", groupFifo(gid), 1, jobId) end
  if removed == 0 then removed = rcall("ZREM", groupLine(gid), jobId) end
  if removed == 0 then return false end
  countGroupWaiting(-1)
  forgetGroupIfEmpty(gid)
  return true
end

-- Limited groups whose window ended join the rotation again.
local function releaseLimitedGroups(now)
  local due = rcall("ZRANGEBYSCORE", P .. "groups:limited", "-inf", now, "LIMIT", "0", "1000")
  for _, gid in ipairs(due) do
    rcall("ZREM", P .. "groups:limited", gid)
    if hasLine(gid) then markGroupReady(gid) end
  end
end

local function parkGroup(gid, untilMs)
  rcall("ZREM", P .. "groups:ready", gid)
  rcall("ZADD", P .. "groups:limited", untilMs, gid)
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
    for _, jobId in ipairs(rcall("LRANGE", groupFifo(gid), 0, -1)) do ids[#ids + 1] = jobId end
    for _, jobId in ipairs(rcall("ZRANGE", groupLine(gid), 0, -1)) do ids[#ids + 1] = jobId end
  end
  return ids
end

-- Every group's line emptied (drain): `drop(ids)` deletes the jobs; the groups keep their
-- settings and active counts.
local function emptyGroupLines(drop)
  for _, gid in ipairs(rcall("ZRANGE", P .. "groups", 0, -1)) do
    drop(rcall("LRANGE", groupFifo(gid), 0, -1))
    drop(rcall("ZRANGE", groupLine(gid), 0, -1))
    rcall("DEL", groupFifo(gid), groupLine(gid))
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
    local ids = rcall("LRANGE", groupFifo(gid), 0, budget - dropped - 1)
    if #ids > 0 then
      drop(ids)
      rcall("LTRIM", groupFifo(gid), #ids, -1)
      dropped = dropped + #ids
    end
    if dropped >= budget then return dropped end
    ids = rcall("ZRANGE", groupLine(gid), 0, budget - dropped - 1)
    if #ids > 0 then
      drop(ids)
      rcall("ZREM", groupLine(gid), unpack(ids))
      dropped = dropped + #ids
    end
  end
  if dropped >= budget then return dropped end
  for _, gid in ipairs(rcall("ZRANGE", P .. "groups", 0, -1)) do
    rcall("DEL", groupFifo(gid), groupLine(gid), P .. "group-opts:" .. gid, groupLimiter(gid))
  end
  rcall("DEL", P .. "groups", P .. "groups:ready", P .. "groups:limited", P .. "groups:full",
    P .. "groups:active", P .. "groups:waiting")
  return dropped
end
