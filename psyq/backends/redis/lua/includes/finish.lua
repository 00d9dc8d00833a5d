-- Finishing and retrying one active job. Needs base, settle, parent.

-- keep: the worker's removeOnComplete/removeOnFail, for a job without its own (or nil).
-- noteGroup: the job's group (read here with the rest) is counted out of it by
-- flushGroupLeaves, after the call's settles (leaveActive left it to this).
local function finishJob(jobId, completed, value, stack, now, keep, noteGroup)
  local jobKey = P .. jobId
  local read = rcall("HMGET", jobKey, "opts", "parent", "deid", "atm", "gid") -- one read, one write
  if noteGroup and read[5] then noteGroupLeft(read[5]) end
  local atm = (tonumber(read[4]) or 0) + 1
  local kind = "failed"
  if completed then kind = "completed" end
  if completed then
    rcall("HSET", jobKey, "atm", atm, "finishedOn", now, "returnvalue", value)
  else
    rcall("HSET", jobKey, "atm", atm, "finishedOn", now, "failedReason", value,
      "stacktrace", stack)
  end
  rcall("ZADD", P .. kind, now, jobId)
  collectMetrics(kind)
  local opts = {}
  if read[1] and read[1] ~= "" then opts = cjson.decode(read[1]) end
  if completed then
    emit("completed", "jobId", jobId, "returnvalue", value, "prev", "active")
  else
    emit("failed", "jobId", jobId, "failedReason", value, "prev", "active")
    if atm >= (tonumber(opts.attempts) or 1) then
      emit("retries-exhausted", "jobId", jobId, "attemptsMade", atm)
    end
  end
  if read[2] then notifyParent(jobId, read[2], completed, value, function() return opts end, now) end
  if read[3] then releaseDedupKey(jobId, read[3]) end
  local own = opts.removeOnFail
  if completed then own = opts.removeOnComplete end
  if own == nil then own = keep end
  retain(P .. kind, own, jobId, now)
end

local function retryJob(jobId, reason, stack, delay, now)
  local jobKey = P .. jobId
  rcall("HINCRBY", jobKey, "atm", 1)
  rcall("HSET", jobKey, "failedReason", reason, "stacktrace", stack)
  if delay > 0 then rcall("HSET", jobKey, "delay", delay) end
  delayOrWait(jobId, delay, now, "failed")
end

-- Whether a completion refused because its job is gone was done by an earlier attempt of
-- the same settle whose reply was lost, the job then removed by its retention
-- (removeOnComplete): only the events stream can tell. The lease's own take is the last
-- `active` of the job within LEASE_SLACK_MS of `started` (the job's processedOn, stamped
-- by that take's script, whose `active` entry carries the script's time, a few ms later or
-- earlier): an earlier lease's take comes before it, a later one cannot come so soon (it
-- needs the lease's lock to expire first; a lock_duration under LEASE_SLACK_MS can fool
-- this). The earlier attempt did it when the stream holds all events since (see
-- eventsSince) and shows after that take nothing but `progress`, then `completed` with
-- this very value, and nothing after. Any other history (the lease ended otherwise, a
-- later take, an add after) answers no, as does a stream too long to read here.
local LEASE_SLACK_MS = 250
local EVENTS_PAGE, EVENTS_READ = 1000, 100000

local function jobEvent(fields, jobId)
  local event, id, value
  for i = 1, #fields, 2 do
    local name = fields[i]
    if name == "event" then event = fields[i + 1]
    elseif name == "jobId" then id = fields[i + 1]
    elseif name == "returnvalue" then value = fields[i + 1] end
  end
  if id == jobId then return event, value end
  return nil
end

-- Whether the events stream holds every event since `from` (ms): it begins before, or
-- never lost an entry (Redis >= 7 counts the entries added; trimming drops the oldest).
local function eventsSince(key, from)
  local oldest = rcall("XRANGE", key, "-", "+", "COUNT", 1)[1]
  if not oldest then return false end
  if tonumber(string.match(oldest[1], "^%d+")) < from then return true end
  local info = rcall("XINFO", "STREAM", key)
  local length, added
  for i = 1, #info, 2 do
    if info[i] == "length" then length = info[i + 1]
    elseif info[i] == "entries-added" then added = info[i + 1] end
  end
  return added ~= nil and added == length
end

-- seen: "before" the lease's take, "taken", "completed" (with the value), "ended" otherwise
local function leaseStep(seen, event, returned, ms, started, value)
  if event == "active" then
    if ms > started + LEASE_SLACK_MS then return nil end -- a take after the lease's
    return "taken" -- the latest take so far: the lease's own, or an earlier one
  end
  if seen == "taken" then
    if event == "completed" and returned == value then return "completed" end
    if event == "progress" then return seen end
    return "ended"
  end
  if seen == "completed" then return nil end
  return seen
end

local function completedEarlier(jobId, started, value)
  local key = P .. "events"
  local from = started - LEASE_SLACK_MS
  if not eventsSince(key, from) then return false end
  local seen, start = "before", string.format("%d", from)
  for _ = 1, EVENTS_READ / EVENTS_PAGE do
    local page = rcall("XRANGE", key, start, "+", "COUNT", EVENTS_PAGE)
    for _, entry in ipairs(page) do
      local event, returned = jobEvent(entry[2], jobId)
      if event ~= nil then
        local ms = tonumber(string.match(entry[1], "^%d+"))
        seen = leaseStep(seen, event, returned, ms, started, value)
        if seen == nil then return false end
      end
    end
    if #page < EVENTS_PAGE then return seen == "completed" end
    local ms, seq = string.match(page[#page][1], "^(%d+)-(%d+)$")
    start = ms .. "-" .. string.format("%d", tonumber(seq) + 1)
  end
  return false
end

-- item = {id, token, kind, value, stack, delay, keep, started}; returns 0 or an ErrorCode.
local function settleJob(item, now)
  local code = checkLock(item.id, item.token)
  if code == -1 and item.kind == "completed" and type(item.started) == "number"
      and completedEarlier(item.id, item.started, item.value) then
    return 0
  end
  if code == 0 and item.kind == "completed"
      and rcall("SCARD", P .. item.id .. ":dependencies") ~= 0 then
    return -4 -- a flow gave it a child while it ran (BullMQ's moveToFinished refuses so)
  end
  local finishing = item.kind ~= "retry"
  if code == 0 then code = leaveActive(item.id, finishing) end
  if code ~= 0 then return code end
  if finishing then
    finishJob(item.id, item.kind == "completed", item.value, item.stack or "[]", now, item.keep,
      true)
  else
    retryJob(item.id, item.value, item.stack or "[]", tonumber(item.delay) or 0, now)
  end
  return 0
end
