-- exportJobs: everything export_jobs reads about a page of jobs, in one call (instead of
-- seven commands per job through the client).
-- KEYS: (the jobs' keys only)
-- ARGV: [1] queue key prefix; [2..] job ids
-- Events: none
-- Returns: one flat array, WIDTH items per job id, in order: the hash's values of FIELDS
--          (false: absent; all false: no such job), then false when the job has no logs
--          and no children keys (most jobs), else one JSON text (cjson) [logs, pending
--          children keys, processed children (flat), ignored children (flat, the :failed
--          hash), failed children keys (:unsuccessful)], an empty list coming as {}.
--          Flat, not a table per job: Redis writes it as fast as one cjson text, and the
--          client reads it with no list or dict per job to build (and to collect).
--          Delayed due times are not read here: the caller has them from the delayed ZSET.
-- Cost: per job one HMGET; logs and children keys are first checked for a CHUNK of jobs
-- at once (one EXISTS each), and read job by job only in a chunk that has some.
--@include base
-- The hash fields a record is read from: jobs.py RECORD_FIELDS, in the same order (values by
-- place: no field names to send, nor a map to build per job on the client).
local FIELDS = {"name", "data", "opts", "timestamp", "delay", "priority", "progress", "atm",
  "attemptsMade", "ats", "stc", "processedOn", "finishedOn", "returnvalue", "failedReason",
  "stacktrace", "parentKey", "pb"}
local WIDTH = #FIELDS + 1
local CHUNK = 64
local CHILD_KEYS = {":dependencies", ":processed", ":failed", ":unsuccessful"}
local LOG_KEYS = {":logs"}
local none = {}

-- Whether any job of ARGV[first..last] has a key with one of these suffixes.
local function anyKey(first, last, suffixes)
  local keys = {}
  for i = first, last do
    local jobKey = P .. ARGV[i]
    for _, suffix in ipairs(suffixes) do
      keys[#keys + 1] = jobKey .. suffix
    end
  end
  return rcall("EXISTS", unpack(keys)) > 0
end

-- The children keys of a parent, or nil when the job has none.
local function children(jobKey)
  local links, processed = jobKey .. ":dependencies", jobKey .. ":processed"
  local ignored, failed = jobKey .. ":failed", jobKey .. ":unsuccessful"
  if rcall("EXISTS", links, processed, ignored, failed) == 0 then
    return nil
  end
  return {rcall("SMEMBERS", links), rcall("HGETALL", processed), rcall("HGETALL", ignored),
    rcall("ZRANGE", failed, 0, -1)}
end

-- The job's extra item: false, or the JSON text of its logs and children keys.
local function extra(jobKey, withLogs, withChildren)
  local logs = withLogs and rcall("LRANGE", jobKey .. ":logs", 0, -1) or none
  local links = withChildren and children(jobKey) or nil
  if #logs == 0 and links == nil then
    return false
  end
  links = links or {none, none, none, none}
  return cjson.encode({logs, links[1], links[2], links[3], links[4]})
end

local out, n = {}, 0
for first = 2, #ARGV, CHUNK do
  local last = math.min(first + CHUNK - 1, #ARGV)
  local withLogs = anyKey(first, last, LOG_KEYS)
  local withChildren = anyKey(first, last, CHILD_KEYS)
  for i = first, last do
    local jobKey = P .. ARGV[i]
    local values = rcall("HMGET", jobKey, unpack(FIELDS))
    for j = 1, WIDTH - 1 do
      out[n + j] = values[j]
    end
    out[n + WIDTH] = extra(jobKey, withLogs, withChildren)
    n = n + WIDTH
  end
end
return out
