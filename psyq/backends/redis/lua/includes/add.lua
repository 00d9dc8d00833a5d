-- Adding one job (standard, delayed, prioritized, held for children). Needs base.lua,
-- settle.lua. meta = {name, id?, ts?, delay, priority, lifo, hold, parent?, dedup?, rjk?}

-- The job that makes this add a duplicate under meta.dedup, or nil.
local function deduplicated(dedup, customId, now)
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
    return nil
  end
  if dedup.extend and dedup.ttl then rcall("PEXPIRE", key, dedup.ttl) end
  emit("deduplicated", "jobId", owner, "deduplicationId", dedup.id,
    "deduplicatedJobId", customId or "")
  return owner
end

local function parentExists(meta)
  return meta.parent == nil or rcall("EXISTS", meta.parent.queue .. ":" .. meta.parent.id) == 1
end

-- A job's id: the next of the ids reserveIds set aside, else INCR of the queue's counter.
local reservedNext, reservedLast = 0, -1
local function newJobId()
  if reservedNext <= reservedLast then
    reservedNext = reservedNext + 1
    return intText(reservedNext - 1)
  end
  return intText(rcall("INCR", P .. "id"))
end

-- Set aside `count` ids with one INCRBY (addJobs, when each of its jobs without an id of its
-- own takes a new one in turn: no deduplication can skip one).
local function reserveIds(count)
  if count > 0 then
    reservedLast = rcall("INCRBY", P .. "id", count)
    reservedNext = reservedLast - count + 1
  end
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
    if meta.dedup.ttl then
      rcall("SET", P .. "de:" .. meta.dedup.id, jobId, "PX", meta.dedup.ttl)
    else
      rcall("SET", P .. "de:" .. meta.dedup.id, jobId)
    end
  end
  if meta.rjk then fields[#fields + 1] = "rjk"; fields[#fields + 1] = meta.rjk end
  rcall("HSET", jobKey, unpack(fields))
end

-- Returns jobId, status (1 added, 0 a job with that id exists, 2 deduplicated).
local function addJob(meta, data, opts, now)
  local jobId = meta.id
  if jobId and rcall("EXISTS", P .. jobId) == 1 then
    emit("duplicated", "jobId", jobId)
    return jobId, 0
  end
  if meta.dedup then
    local owner = deduplicated(meta.dedup, jobId, now)
    if owner then return owner, 2 end
  end
  if not jobId then jobId = newJobId() end
  local ts = meta.ts or now
  storeJob(jobId, meta, data, opts, meta.ts or nowAsText(now))
  emit("added", "jobId", jobId, "name", meta.name)
  local delay = meta.delay or 0
  if meta.hold then
    rcall("ZADD", P .. "waiting-children", ts, jobId)
    emit("waiting-children", "jobId", jobId)
  elseif delay > 0 then
    delayJob(jobId, ts + delay)
  else
    enqueue(jobId, meta.priority or 0, meta.lifo)
    emit("waiting", "jobId", jobId)
  end
  return jobId, 1
end

-- addJob for the usual job of a bulk add: a name, data and opts, no other add-time field
-- (meta {name = name}), in a `batched` call (addJobs). The same writes and events in the
-- same order; what addJob works out per job (the keys, the timestamp's text, the wait
-- list, the marker, the trim) is worked out by the call's first such job of a queue.
local plainOf, plainEvents, plainTs, plainPushes = nil, nil, nil, nil
local function addPlainJob(name, data, opts, now)
  if plainOf ~= P then
    plainOf, plainEvents, plainTs = P, P .. "events", nowAsText(now)
    plainPushes = pendingPushesOf(waitKey())
    addBaseMarker()
    trimLater()
  end
  local jobId = newJobId()
  rcall("HSET", P .. jobId, "name", name, "data", data, "opts", opts,
    "timestamp", plainTs, "delay", "0", "priority", "0")
  rcall("XADD", plainEvents, "*", "event", "added", "jobId", jobId, "name", name)
  plainPushes[#plainPushes + 1] = jobId
  rcall("XADD", plainEvents, "*", "event", "waiting", "jobId", jobId)
  return jobId
end
