-- Taking jobs: promote due delayed jobs, honour pause / rate limits / global concurrency,
-- then lock up to #tokens jobs: plain ones first, then the groups' in rotation. Needs
-- base.lua, groups.lua, grouptake.lua.

-- Delayed jobs whose time has come go to waiting (at most 1000 per call).
local function promoteDue(now)
  local due = rcall("ZRANGEBYSCORE", P .. "delayed", 0, (now + 1) * DELAY_SPAN - 1, "LIMIT", 0, 1000)
  for _, jobId in ipairs(due) do
    rcall("ZREM", P .. "delayed", jobId)
    rcall("HSET", P .. jobId, "delay", 0)
    toWait(jobId, "delayed")
  end
  if #due > 0 then addDelayMarker() end
end

local MANUAL_LIMIT = 9007199254740991 -- rate_limit(ms) sets the limiter to this

-- How many jobs the rate limiter lets through now, and the ms until it opens again.
local function limiterAllows(wanted, max, duration)
  local ttl = rcall("PTTL", P .. "limiter")
  if ttl <= 0 then -- no limiter key, or one without a ttl: counted as unused
    if max == nil then return wanted, 0 end
    if max <= 0 then return 0, 1 end
    return math.min(wanted, max), 0
  end
  local used = tonumber(rcall("GET", P .. "limiter")) or 0
  if max == nil then
    if used >= MANUAL_LIMIT then return 0, ttl end -- a manual rate_limit(ms)
    return wanted, 0
  end
  if used >= max then return 0, math.max(ttl, 1) end
  return math.min(wanted, max - used), 0
end

local function countTaken(n, max, duration)
  if n == 0 or max == nil then return end
  local used = rcall("INCRBY", P .. "limiter", n)
  if used == n then rcall("PEXPIRE", P .. "limiter", duration) end
end

-- Plain jobs first: `wait`, then `prioritized`, each asked until found empty in this
-- script call (nothing adds to them while it takes); then the groups' rotation
-- (grouptake.lua).
local plainEmpty = {}
local function nextPlain()
  local empty = plainEmpty[P]
  if empty == nil then
    empty = {}
    plainEmpty[P] = empty
  end
  if not empty.wait then
    local jobId = rcall("RPOPLPUSH", P .. "wait", P .. "active")
    if jobId then return jobId end
    empty.wait = true
  end
  if not empty.prioritized then
    local top = rcall("ZPOPMIN", P .. "prioritized")
    if top[1] then
      rcall("LPUSH", P .. "active", top[1])
      return top[1]
    end
    empty.prioritized = true
  end
  return nil
end

-- Whether work is left after a take that took jobs: a list not found empty is asked, the
-- rotation only when the take did not see it (`groupsLeft` nil).
local function workLeft(groupsLeft)
  local empty = plainEmpty[P] or {}
  if not empty.wait and rcall("LLEN", P .. "wait") > 0 then return true end
  if not empty.prioritized and rcall("ZCARD", P .. "prioritized") > 0 then return true end
  if groupsLeft == nil then return rcall("EXISTS", P .. "groups:ready") == 1 end
  return groupsLeft
end

-- (Reading the hash first to write ats with processedOn in one HSET, returning a patched
-- copy, costs Redis more than the HINCRBY it saves: measured, issue 24.)
local function lockJob(jobId, token, lockDuration, worker, now)
  local jobKey = P .. jobId
  rcall("SET", jobKey .. ":lock", token, "PX", lockDuration)
  rcall("HINCRBY", jobKey, "ats", 1)
  if worker ~= "" then
    rcall("HSET", jobKey, "processedOn", now, "pb", worker)
  else
    rcall("HSET", jobKey, "processedOn", now)
  end
  emit("active", "jobId", jobId, "prev", "waiting")
  local fields = rcall("HGETALL", jobKey)
  fields[#fields + 1] = "__id"
  fields[#fields + 1] = jobId
  return fields
end

-- An active job under a lock of the caller's goes back in line, next to be taken, its
-- start uncounted: the take that started it was lost with its reply, so no worker saw it
-- (moveJobFromActiveToWait, a hand back of a job a worker took, keeps the start counted).
local function handBack(jobId)
  local jobKey = P .. jobId
  rcall("LREM", P .. "active", -1, jobId)
  groupJobLeft(jobId)
  rcall("DEL", jobKey .. ":lock")
  rcall("SREM", P .. "stalled", jobId)
  rcall("HDEL", P .. "cancelled", jobId)
  if (tonumber(rcall("HGET", jobKey, "ats")) or 0) > 0 then
    rcall("HINCRBY", jobKey, "ats", -1)
  end
  toWait(jobId, "active", true)
end

-- The jobs an earlier take of the caller's locked under `req.held` (a worker's tokens, fresh
-- for each take, of calls whose reply was lost with the connection): up to #req.tokens of
-- them are returned as that reply would have returned them (with "__token"), the others
-- handed back. One pass over active, only when a reply was lost.
local function heldJobs(req)
  local jobs = {}
  if type(req.held) ~= "table" or #req.held == 0 then return jobs end
  local held = {}
  for _, token in ipairs(req.held) do held[token] = true end
  for _, jobId in ipairs(rcall("LRANGE", P .. "active", 0, -1)) do
    local token = rcall("GET", P .. jobId .. ":lock")
    if token and held[token] then
      held[token] = nil
      if #jobs < #req.tokens then
        local fields = rcall("HGETALL", P .. jobId)
        fields[#fields + 1] = "__id"
        fields[#fields + 1] = jobId
        fields[#fields + 1] = "__token"
        fields[#fields + 1] = token
        jobs[#jobs + 1] = fields
      else
        handBack(jobId)
      end
    end
  end
  return jobs
end

-- Returns a list of job hashes (flat field/value arrays with "__id"; the held jobs first,
-- ending "__token", token), possibly empty.
-- req = {tokens = {...}, lockDuration = ms, worker = name, max = n|nil, duration = ms|nil,
--        held = {...}|nil, gconc = n|nil, gmax = n|nil, gduration = ms|nil} (g*: the
--        worker's limits per group)
local function takeJobs(req, now)
  plainEmpty[P] = nil
  local taken = heldJobs(req)
  promoteDue(now)
  releaseLimitedGroups(now)
  if isPaused() then return taken end
  local wanted = #req.tokens - #taken
  local limit = concurrencyLimit()
  if limit ~= nil then
    wanted = math.min(wanted, limit - rcall("LLEN", P .. "active"))
  end
  local max, duration = req.max, req.duration
  local meta = queueMeta()
  if meta.max ~= nil then
    max, duration = meta.max, meta.duration
  end
  wanted = limiterAllows(wanted, max, duration)
  local ids, groupsLeft = {}, nil
  while #ids < wanted do
    local jobId = nextPlain()
    if not jobId then break end
    ids[#ids + 1] = jobId
  end
  if #ids < wanted then groupsLeft = takeGrouped(req, now, wanted - #ids, ids) end
  for i, jobId in ipairs(ids) do
    taken[#taken + 1] = lockJob(jobId, req.tokens[i], req.lockDuration, req.worker or "", now)
  end
  countTaken(#ids, max, duration)
  if #ids > 0 and workLeft(groupsLeft) then
    addBaseMarker() -- more work: wake the next blocked worker too
  end
  return taken
end
