-- importJobs: write exported jobs idempotently by id, in their states (active ones arrive
-- as waiting), with logs and flow links, without events. A job already there with the same
-- name, data and timestamp is skipped; a different one makes the whole call write nothing
-- unless overwrite.
-- KEYS: wait paused prioritized delayed completed failed waiting-children marker meta id
-- ARGV: [1] queue key prefix; [2] overwrite (1/0); [3] a MessagePack array, one array per
--       job: [id, state, fields, logs?, due?, deps?]; fields is the job hash as a flat
--       [field, value, ...] list starting name, data, timestamp (read by place)
--       (one argument for the page: one decode here, one encode in the client; arrays, not
--       maps: a map's keys cost a decode per job)
-- Events: none
-- Returns: {"ok", written} or {"conflict", job id}
--@include base settle parent state remove
local overwrite = ARGV[2] == "1"
local jobs, skip, present = cmsgpack.unpack(ARGV[3]), {}, {}
local ID, STATE, FIELDS, LOGS, DUE, DEPS = 1, 2, 3, 4, 5, 6 -- places in a job's array

-- Keys of every job of the page, checked with one EXISTS per 1000: into a fresh queue (the
-- usual case) no job needs a check of its own.
local function inChunks(list, command, key)
  for i = 1, #list, 1000 do
    if key then
      rcall(command, key, unpack(list, i, math.min(i + 999, #list)))
    else
      rcall(command, unpack(list, i, math.min(i + 999, #list)))
    end
  end
end

local jobKeys, found = {}, 0
for i, job in ipairs(jobs) do jobKeys[i] = P .. job[ID] end
for i = 1, #jobKeys, 1000 do
  found = found + rcall("EXISTS", unpack(jobKeys, i, math.min(i + 999, #jobKeys)))
end
for _, job in ipairs(found > 0 and jobs or {}) do
  local jobKey = P .. job[ID]
  if rcall("EXISTS", jobKey) == 1 then
    present[job[ID]] = true
    local stored = rcall("HMGET", jobKey, "name", "data", "timestamp")
    local fields = job[FIELDS]
    local same = stored[1] == fields[2] and stored[2] == fields[4] and stored[3] == fields[6]
    if same then
      skip[job[ID]] = true
    elseif not overwrite then
      return {"conflict", job[ID]}
    end
  end
end

local function field(flat, name)
  for i = 1, #flat, 2 do
    if flat[i] == name then return flat[i + 1] end
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

local function place(job)
  local state, jobId = job[STATE], job[ID]
  if state == "waiting" or state == "active" or state == "paused" then
    waiting[#waiting + 1] = jobId
  elseif state == "prioritized" then
    local priority = tonumber(field(job[FIELDS], "priority")) or 1
    rcall("ZADD", P .. "prioritized", priorityScore(priority), jobId)
  elseif state == "delayed" then
    rcall("ZADD", P .. "delayed", delayedScore(job[DUE]), jobId)
  elseif state == "completed" or state == "failed" then
    score(state, field(job[FIELDS], "finishedOn"), jobId)
  elseif state == "waiting-children" then
    score(state, job[FIELDS][6], jobId)
  end
end

local function link(jobKey, deps)
  if deps == nil then return end
  for _, key in ipairs(deps.pending or {}) do rcall("SADD", jobKey .. ":dependencies", key) end
  for key, value in pairs(deps.processed or {}) do rcall("HSET", jobKey .. ":processed", key, value) end
  for key, reason in pairs(deps.ignored or {}) do rcall("HSET", jobKey .. ":failed", key, reason) end
  for key, _ in pairs(deps.failed or {}) do rcall("ZADD", jobKey .. ":unsuccessful", 0, key) end
end

-- Logs and locks of the jobs written go first, one DEL per 500 jobs (a job key that was
-- there goes with its old job below).
local stale = {}
for _, job in ipairs(jobs) do
  if not skip[job[ID]] then
    stale[#stale + 1] = P .. job[ID] .. ":logs"
    stale[#stale + 1] = P .. job[ID] .. ":lock"
  end
end
inChunks(stale, "DEL")

local written, lastId, done = 0, tonumber(rcall("GET", P .. "id")) or 0, {}
for _, job in ipairs(jobs) do
  if not skip[job[ID]] then
    local jobKey = P .. job[ID]
    if present[job[ID]] or done[job[ID]] then -- overwrite: the old job goes, without events
      pushWaiting() -- so an id twice in a page leaves its list like one by one
      pushScored()
      detach(job[ID], jobState(job[ID]))
      rcall("LREM", P .. "active", 0, job[ID])
      removeJobKeys(job[ID])
      rcall("DEL", jobKey, jobKey .. ":logs", jobKey .. ":lock")
    end
    rcall("HSET", jobKey, unpack(job[FIELDS]))
    local logs = job[LOGS] or {}
    inChunks(logs, "RPUSH", jobKey .. ":logs") -- unpack is bounded by Lua's stack
    link(jobKey, job[DEPS])
    place(job)
    done[job[ID]] = true
    written = written + 1
  end
  local numeric = tonumber(job[ID])
  if numeric and numeric > lastId then lastId = numeric end
end
pushWaiting()
pushScored()
rcall("SET", P .. "id", lastId)
if rcall("LLEN", P .. "wait") > 0 or rcall("ZCARD", P .. "prioritized") > 0 then addBaseMarker() end
addDelayMarker()
return {"ok", written}
