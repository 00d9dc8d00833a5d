-- Adding one job (standard, delayed, prioritized, held for children, grouped). Needs
-- base.lua, groups.lua, jobkeys.lua.
-- meta = {name, id?, ts?, delay, priority, lifo, hold, parent?, dedup?, rjk?,
--         group? = {id, priority?, maxSize?}}

-- The job that makes this add a duplicate under meta.dedup, or nil and, when a debounce
-- replace removed the delayed job that held the key, that job's id.
local function deduplicated(dedup, newId, now)
  local key = P .. "de:" .. dedup.id
  local owner = rcall("GET", key)
  if not owner then return nil end
  if rcall("EXISTS", P .. owner) == 0 then
    rcall("DEL", key)
    return nil
  end
  if dedup.replace and rcall("ZSCORE", P .. "delayed", owner) then
    rcall("ZREM", P .. "delayed", owner)
    removeJobKeys(owner)
    emit("removed", "jobId", owner, "prev", "delayed")
    -- as BullMQ's deduplicateJob: without extend, the new job takes the key's ttl as it is
    dedup.keepTtl = dedup.ttl and dedup.ttl > 0 and not dedup.extend
    return nil, owner
  end
  if dedup.extend and dedup.ttl then rcall("PEXPIRE", key, dedup.ttl) end
  emit("deduplicated", "jobId", owner, "deduplicationId", dedup.id,
    "deduplicatedJobId", newId)
  return owner
end

local function parentExists(meta)
  return meta.parent == nil or rcall("EXISTS", meta.parent.queue .. ":" .. meta.parent.id) == 1
end

-- Numbers a job writes are passed as text made once per call or with "%d" (Redis 7.0 makes
-- a number argument text with snprintf("%.17g"), Lua's tostring with "%.14g": ~2,000
-- instructions each, more than a short command's own work).
local nowTextOf, nowText = nil, nil
local function nowAsText(now)
  if now ~= nowTextOf then nowTextOf, nowText = now, string.format("%d", now) end
  return nowText
end

-- A job's id: the next of the ids set aside (addJobs: reservedNext..reservedLast), else
-- INCR of the queue's counter.
local reservedNext, reservedLast = 0, -1
local function newJobId()
  if reservedNext <= reservedLast then
    reservedNext = reservedNext + 1
    return string.format("%d", reservedNext - 1)
  end
  return string.format("%d", rcall("INCR", P .. "id"))
end

-- `ts` is text (or a number, which Redis turns into text).
local function storeJob(jobId, meta, data, opts, ts)
  local jobKey = P .. jobId
  local fields = {"name", meta.name, "data", data, "opts", opts, "timestamp", ts,
    "delay", meta.delay or "0", "priority", meta.priority or "0"}
  if meta.parent then
    local link = meta.parent
    local parentKey = link.queue .. ":" .. link.id
    local parentJson = cjson.encode({id = link.id, queueKey = link.queue, fpof = link.fpof,
      cpof = link.cpof, idof = link.idof, rdof = link.rdof})
    fields[#fields + 1] = "parentKey"; fields[#fields + 1] = parentKey
    fields[#fields + 1] = "parent"; fields[#fields + 1] = parentJson
    rcall("SADD", parentKey .. ":dependencies", jobKey)
  end
  if meta.dedup then
    fields[#fields + 1] = "deid"; fields[#fields + 1] = meta.dedup.id
    if meta.dedup.keepTtl then
      rcall("SET", P .. "de:" .. meta.dedup.id, jobId, "KEEPTTL")
    elseif meta.dedup.ttl then
      rcall("SET", P .. "de:" .. meta.dedup.id, jobId, "PX", meta.dedup.ttl)
    else
      rcall("SET", P .. "de:" .. meta.dedup.id, jobId)
    end
  end
  if meta.rjk then fields[#fields + 1] = "rjk"; fields[#fields + 1] = meta.rjk end
  if meta.group then
    fields[#fields + 1] = "gid"; fields[#fields + 1] = meta.group.id
    if (meta.group.priority or 0) > 0 then
      fields[#fields + 1] = "gpr"; fields[#fields + 1] = meta.group.priority
    end
  end
  rcall("HSET", jobKey, unpack(fields))
end

-- Returns jobId, status (1 added, 0 a job with that id exists, 2 deduplicated).
local function addJob(meta, data, opts, now)
  local jobId = meta.id
  if jobId and rcall("EXISTS", P .. jobId) == 1 then
    emit("duplicated", "jobId", jobId)
    return jobId, 0
  end
  if not jobId then jobId = newJobId() end -- before deduplication, as BullMQ takes it: a
  local replaced = nil -- deduplicated add's event names the id it would have had
  if meta.dedup then
    local owner
    owner, replaced = deduplicated(meta.dedup, jobId, now)
    if owner then return owner, 2 end
  end
  if replaced then -- as BullMQ's deduplicateJob: the new job, and the one it replaced
    emit("deduplicated", "jobId", jobId, "deduplicationId", meta.dedup.id,
      "deduplicatedJobId", replaced)
  end
  local ts = meta.ts or now
  storeJob(jobId, meta, data, opts, meta.ts or nowAsText(now))
  emit("added", "jobId", jobId, "name", meta.name)
  local delay = meta.delay or 0
  if meta.hold then
    rcall("ZADD", P .. "waiting-children", ts, jobId)
    emit("waiting-children", "jobId", jobId)
  elseif delay > 0 then
    delayJob(jobId, ts + delay)
  elseif meta.group then
    enqueueGrouped(jobId, meta.group.id, meta.group.priority or 0, false)
    emit("waiting", "jobId", jobId)
  else
    enqueue(jobId, meta.priority or 0, meta.lifo)
    emit("waiting", "jobId", jobId)
  end
  return jobId, 1
end
