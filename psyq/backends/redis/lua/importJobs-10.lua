-- importJobs: write exported jobs idempotently by id, in their states (active ones arrive
-- as waiting), with logs and flow links, without events. A job already there with the same
-- name, data and timestamp is skipped; a different one makes the whole call write nothing
-- unless overwrite.
-- KEYS: wait paused prioritized delayed completed failed waiting-children marker meta id
-- ARGV: [1] queue key prefix; [2] overwrite (1/0); [3] the page, one flat MessagePack
--       array: the job count, then per job: id, state, n, the job hash as n items
--       (field, value, ... starting name, data, timestamp: read by place), and an extra:
--       false, or {logs = [...], due = ms, deps = {...}}. One argument for the page (one
--       decode here, one encode in the client), flat: building a table per job was the
--       larger part of decoding it.
-- Events: none
-- Returns: {"ok", written} or {"conflict", job id}
--@include base groups jobkeys settle parent state remove
local overwrite = ARGV[2] == "1"
local page, skip, present = cmsgpack.unpack(ARGV[3]), {}, {}

-- Where each job's entries start in the page.
local count, at = page[1], {}
do
  local start = 2
  for j = 1, count do
    at[j] = start
    start = start + 4 + page[start + 2]
  end
end
local function idOf(j) return page[at[j]] end
local function itemsEnd(j) return at[j] + 2 + page[at[j] + 2] end -- items: at[j] + 3 .. this
local function extraOf(j) return page[itemsEnd(j) + 1] end
local function fieldOf(j, name)
  for i = at[j] + 3, itemsEnd(j), 2 do
    if page[i] == name then return page[i + 1] end
  end
end

local function inChunks(list, command, key)
  for i = 1, #list, 1000 do
    if key then
      rcall(command, key, unpack(list, i, math.min(i + 999, #list)))
    else
      rcall(command, unpack(list, i, math.min(i + 999, #list)))
    end
  end
end

-- Keys of every job of the page, checked with one EXISTS per 1000: into a fresh queue (the
-- usual case) no job needs a check of its own.
local jobKeys, found = {}, 0
for j = 1, count do jobKeys[j] = P .. page[at[j]] end
for i = 1, count, 1000 do
  found = found + rcall("EXISTS", unpack(jobKeys, i, math.min(i + 999, count)))
end
for j = 1, (found > 0 and count or 0) do
  local jobId = idOf(j)
  if rcall("EXISTS", jobKeys[j]) == 1 then
    present[jobId] = true
    local stored = rcall("HMGET", jobKeys[j], "name", "data", "timestamp")
    local f = at[j] + 3 -- "name", its value, "data", its value, "timestamp", its value
    local same = stored[1] == page[f + 1] and stored[2] == page[f + 3] and stored[3] == page[f + 5]
    if same then
      skip[jobId] = true
    elseif not overwrite then
      return {"conflict", jobId}
    end
  end
end

-- Waiting jobs go to their list in one LPUSH per chunk, in page order.
local waitTarget, waiting = waitKey(), {}
local function pushWaiting()
  for i = 1, #waiting, 1000 do
    rcall("LPUSH", waitTarget, unpack(waiting, i, math.min(i + 999, #waiting)))
  end
  waiting = {}
end

-- Finished and waiting-children jobs go to their sorted sets in one ZADD per chunk
-- (their scores are their own: finish time, timestamp).
local scored = {completed = {}, failed = {}, ["waiting-children"] = {}}
local function pushScored()
  for state, entries in pairs(scored) do
    inChunks(entries, "ZADD", P .. state)
    scored[state] = {}
  end
end

local function score(state, value, jobId)
  local list = scored[state]
  list[#list + 1] = tonumber(value) or 0
  list[#list + 1] = jobId
end

local function place(j, jobId, state)
  if state == "waiting" or state == "active" or state == "paused" then
    local gid = fieldOf(j, "gid")
    if gid then
      enqueueGrouped(jobId, gid, tonumber(fieldOf(j, "gpr")) or 0, false)
    else
      waiting[#waiting + 1] = jobId
    end
  elseif state == "prioritized" then
    local priority = tonumber(fieldOf(j, "priority")) or 1
    rcall("ZADD", P .. "prioritized", priorityScore(priority), jobId)
  elseif state == "delayed" then
    local extra = extraOf(j)
    rcall("ZADD", P .. "delayed", delayedScore(extra and extra.due), jobId)
  elseif state == "completed" or state == "failed" then
    score(state, fieldOf(j, "finishedOn"), jobId)
  elseif state == "waiting-children" then
    score(state, page[at[j] + 8], jobId) -- the timestamp's value
  end
end

local function link(jobKey, deps)
  if deps == nil then return end
  for _, key in ipairs(deps.pending or {}) do rcall("SADD", jobKey .. ":dependencies", key) end
  for key, value in pairs(deps.processed or {}) do rcall("HSET", jobKey .. ":processed", key, value) end
  for key, reason in pairs(deps.ignored or {}) do rcall("HSET", jobKey .. ":failed", key, reason) end
  for key, _ in pairs(deps.failed or {}) do rcall("ZADD", jobKey .. ":unsuccessful", 0, key) end
end

-- A job's logs and lock live and go with its hash (every script that removes a job deletes
-- them too, and a log row is only added to a job that is there), so a job not found here
-- has none to clear; one that was there goes below with its logs and lock.
local written, lastId, done = 0, tonumber(rcall("GET", P .. "id")) or 0, {}
for j = 1, count do
  local a = at[j] -- idOf, the state, itemsEnd and extraOf read inline: this loop runs per job
  local jobId, state, last = page[a], page[a + 1], a + 2 + page[a + 2]
  if not skip[jobId] then
    local jobKey = jobKeys[j]
    if present[jobId] or done[jobId] then -- overwrite: the old job goes, without events
      pushWaiting() -- so an id twice in a page leaves its list like one by one
      pushScored()
      detach(jobId, jobState(jobId))
      rcall("LREM", P .. "active", 0, jobId)
      removeJobKeys(jobId)
      rcall("DEL", jobKey, jobKey .. ":logs", jobKey .. ":lock")
    end
    rcall("HSET", jobKey, unpack(page, a + 3, last))
    local extra = page[last + 1]
    if extra then
      if extra.logs then inChunks(extra.logs, "RPUSH", jobKey .. ":logs") end -- unpack is bounded by Lua's stack
      link(jobKey, extra.deps)
    end
    place(j, jobId, state)
    done[jobId] = true
    written = written + 1
  end
  local numeric = tonumber(jobId)
  if numeric and numeric > lastId then lastId = numeric end
end
pushWaiting()
pushScored()
rcall("SET", P .. "id", lastId)
if rcall("LLEN", P .. "wait") > 0 or rcall("ZCARD", P .. "prioritized") > 0 then addBaseMarker() end
addDelayMarker()
return {"ok", written}
