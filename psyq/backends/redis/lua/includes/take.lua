-- Taking jobs: promote due delayed jobs, honour pause / rate limits / global concurrency,
-- then lock up to #tokens jobs. Needs base.lua.

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

local function nextReady()
  local jobId = rcall("RPOPLPUSH", P .. "wait", P .. "active")
  if jobId then return jobId end
  local top = rcall("ZPOPMIN", P .. "prioritized")
  if top[1] then
    rcall("LPUSH", P .. "active", top[1])
    return top[1]
  end
  return nil
end

-- The job's fields are read first (req.fields, in the caller's order: one HMGET) and the
-- fields the take changes are patched into the copy returned, so the take writes the hash
-- once (ats + 1, processedOn, pb). `at`: the places of ats, processedOn and pb in the copy.
local function lockJob(jobId, token, req, at, now)
  local jobKey = P .. jobId
  rcall("SET", jobKey .. ":lock", token, "PX", req.lockDuration)
  local values = rcall("HMGET", jobKey, unpack(req.fields))
  local ats = string.format("%d", (tonumber(values[at.ats]) or 0) + 1)
  local stamp = string.format("%d", now)
  local worker = req.worker or ""
  values[at.ats], values[at.processedOn] = ats, stamp
  if worker ~= "" then
    values[at.pb] = worker
    rcall("HSET", jobKey, "ats", ats, "processedOn", stamp, "pb", worker)
  else
    rcall("HSET", jobKey, "ats", ats, "processedOn", stamp)
  end
  emit("active", "jobId", jobId, "prev", "waiting")
  values[#values + 1] = jobId
  return values
end

-- Returns a list of jobs, possibly empty: each the values of req.fields (false: absent),
-- then the job's id.
-- req = {tokens = {...}, lockDuration = ms, worker = name, max = n|nil, duration = ms|nil,
--        fields = {hash field names, with ats, processedOn and pb among them}}
local function takeJobs(req, now)
  promoteDue(now)
  if isPaused() then return {} end
  local wanted = #req.tokens
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
  local taken = {}
  local at = {}
  for i, field in ipairs(req.fields) do at[field] = i end
  for i = 1, wanted do
    local jobId = nextReady()
    if not jobId then break end
    taken[#taken + 1] = lockJob(jobId, req.tokens[i], req, at, now)
  end
  countTaken(#taken, max, duration)
  if #taken > 0 and (rcall("LLEN", P .. "wait") > 0 or rcall("ZCARD", P .. "prioritized") > 0) then
    addBaseMarker() -- more work: wake the next blocked worker too
  end
  return taken
end
