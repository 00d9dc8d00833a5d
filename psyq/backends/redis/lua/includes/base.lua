-- Shared helpers: clock, events, markers, score encodings and placing a job in a line.
-- Expects `K` (queue keys by suffix) and `P` (the queue key prefix "<prefix>:<queue>:").
local rcall = redis.call
local PRIORITY_SPAN = 0x100000000 -- prioritized score = priority * 2^32 + counter
local DELAY_SPAN = 0x1000 -- delayed score = due * 4096 + seq

local function nowMs()
  local t = rcall("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The events' bound when the meta hash has none: BullMQ's scripts store it there at once
-- (10000), so a queue has its meta hash from its first add, as BullMQ's readers expect. The
-- value read is the value stored: a cached entry (metaStable, below) stays true.
local DEFAULT_MAX_LEN_EVENTS = 10000
local function storeDefaultMaxLen()
  rcall("HSET", P .. "meta", "opts.maxLenEvents", DEFAULT_MAX_LEN_EVENTS)
  return DEFAULT_MAX_LEN_EVENTS
end

-- Scripts in which no queue's meta hash changes (adds, settles, fetches, the wait hint) set
-- `metaStable`: each queue's paused flag, concurrency, rate limit and maxLenEvents are then
-- read with one HMGET per queue and script call. Other scripts read them as they go.
-- Keyed by P (a flow or a parent spans queues).
local metaStable = false
local metaCache = {}
local function queueMeta()
  local entry = metaCache[P]
  if entry == nil then
    local v = rcall("HMGET", P .. "meta", "paused", "concurrency", "max", "duration",
      "opts.maxLenEvents")
    local maxLen = tonumber(v[5]) or storeDefaultMaxLen()
    entry = {paused = v[1] ~= false, concurrency = tonumber(v[2]), max = tonumber(v[3]),
      duration = tonumber(v[4]), maxLen = maxLen, maxLenText = string.format("%d", maxLen)}
    if metaStable then metaCache[P] = entry end
  end
  return entry
end

-- The events' MAXLEN, and as text: Redis 7.0 turns a number passed to redis.call into text
-- with snprintf("%.17g"), ~2,000 instructions, more than a short command's own work.
local maxLenEvents = nil -- read once per script call (no script changes it)
local function maxEvents()
  if metaStable then
    local meta = queueMeta()
    return meta.maxLen, meta.maxLenText
  end
  if maxLenEvents == nil then
    local maxLen = tonumber(rcall("HGET", P .. "meta", "opts.maxLenEvents")) or storeDefaultMaxLen()
    maxLenEvents = {maxLen, string.format("%d", maxLen)}
  end
  return maxLenEvents[1], maxLenEvents[2]
end

-- MAXLEN ~ trims whole stream nodes (100 entries): a small bound is kept exactly instead.
local function emit(event, ...)
  local maxLen, text = maxEvents()
  if maxLen < 1000 then
    rcall("XADD", P .. "events", "MAXLEN", text, "*", "event", event, ...)
  else
    rcall("XADD", P .. "events", "MAXLEN", "~", text, "*", "event", event, ...)
  end
end

-- Scripts that only add jobs (addJobs, addFlow) set `addsOnly` (and `metaStable`): during
-- such a call no queue is paused, resumed or has jobs taken, so each queue's base marker is
-- set once, not once per job. Keyed by P (a flow spans queues).
local addsOnly = false
local markedQueues = {}

local function readPaused()
  return rcall("HEXISTS", P .. "meta", "paused") == 1
end

local function isPaused()
  if metaStable then return queueMeta().paused end
  return readPaused()
end

local function waitKey()
  if isPaused() then return P .. "paused" end
  return P .. "wait"
end

local function concurrencyLimit()
  if metaStable then return queueMeta().concurrency end
  return tonumber(rcall("HGET", P .. "meta", "concurrency"))
end

local function isMaxed()
  local limit = concurrencyLimit()
  return limit ~= nil and rcall("LLEN", P .. "active") >= limit
end

-- Wake one blocked worker (BullMQ's base marker), unless nothing could be taken.
local function addBaseMarker()
  if addsOnly then
    if markedQueues[P] then return end
    markedQueues[P] = true
  end
  if not isPaused() and not isMaxed() then
    rcall("ZADD", P .. "marker", 0, "0")
  end
end

-- Tell blocked workers when the next delayed job is due (BullMQ's delay marker).
local function addDelayMarker()
  if isPaused() then return end
  local first = rcall("ZRANGE", P .. "delayed", 0, 0, "WITHSCORES")
  if first[2] then
    rcall("ZADD", P .. "marker", math.floor(tonumber(first[2]) / DELAY_SPAN), "1")
  end
end

local function priorityScore(priority)
  local counter = rcall("INCR", P .. "pc")
  return priority * PRIORITY_SPAN + counter % PRIORITY_SPAN
end

local function delayedScore(due)
  local low = due * DELAY_SPAN
  local high = low + DELAY_SPAN - 1
  local last = rcall("ZREVRANGEBYSCORE", P .. "delayed", high, low, "WITHSCORES", "LIMIT", 0, 1)
  if last[2] then
    return math.min(tonumber(last[2]) + 1, high)
  end
  return low
end

-- Make a job ready: prioritized by priority, else the wait (or paused) list.
-- `front`: next to be taken (lifo jobs, jobs handed back).
local function enqueue(jobId, priority, front)
  if priority > 0 then
    rcall("ZADD", P .. "prioritized", priorityScore(priority), jobId)
  elseif front then
    rcall("RPUSH", waitKey(), jobId)
  else
    rcall("LPUSH", waitKey(), jobId)
  end
  addBaseMarker()
end

local function isLifo(jobKey)
  local opts = rcall("HGET", jobKey, "opts")
  return opts ~= false and string.find(opts, '"lifo":true', 1, true) ~= nil
end

-- A job of a group joins its group's line (groups.lua sets this: every script that may put
-- a job back in line includes it).
local enqueueGrouped = nil

-- A detached job goes back in line, its group's when it has one (emits waiting with `prev`).
local function toWait(jobId, prev, front)
  local jobKey = P .. jobId
  local v = rcall("HMGET", jobKey, "priority", "gid", "gpr")
  if v[2] then
    enqueueGrouped(jobId, v[2], tonumber(v[3]) or 0, front)
  else
    enqueue(jobId, tonumber(v[1]) or 0, front or isLifo(jobKey))
  end
  emit("waiting", "jobId", jobId, "prev", prev)
end

local function delayJob(jobId, due)
  rcall("ZADD", P .. "delayed", delayedScore(due), jobId)
  emit("delayed", "jobId", jobId, "delay", due)
  addDelayMarker()
end

-- A detached job with `delay` ms left waits in delayed until now + delay, else goes back in
-- line (waiting, with `prev`).
local function delayOrWait(jobId, delay, now, prev)
  if delay > 0 then
    delayJob(jobId, now + delay)
  else
    toWait(jobId, prev)
  end
end
