-- exportJobs: everything export_jobs reads about a page of jobs, in one call (instead of
-- seven commands per job through the client).
-- KEYS: delayed
-- ARGV: [1] queue key prefix; [2..] job ids
-- Events: none
-- Returns: one JSON text (cjson): per job id, in order, [the hash's values of FIELDS
--          (false: absent; all false: no such job), logs, delayed score (false when not
--          delayed), pending children keys, processed children (flat), ignored children
--          (flat, the :failed hash), failed children keys (:unsuccessful)]; an empty list
--          comes as {} (cjson cannot tell it from a map).
--          One string instead of nested replies: Redis encodes it in no more time than the
--          protocol's nested arrays (16.9 against 19-20 ms per 1000 jobs measured alone),
--          and the client reads it with one json.loads (about as fast as hiredis).
--@include base
-- The hash fields a record is read from: jobs.py RECORD_FIELDS, in the same order (values by
-- place: no field names to send, nor a map to build per job on the client).
local FIELDS = {"name", "data", "opts", "timestamp", "delay", "priority", "progress", "atm",
  "attemptsMade", "ats", "stc", "processedOn", "finishedOn", "returnvalue", "failedReason",
  "stacktrace", "parentKey", "pb"}
local out, none = {}, {}
for i = 2, #ARGV do
  local jobId = ARGV[i]
  local jobKey = P .. jobId
  local links = jobKey .. ":dependencies"
  local processed, ignored = jobKey .. ":processed", jobKey .. ":failed"
  local failed = jobKey .. ":unsuccessful"
  local entry = {
    rcall("HMGET", jobKey, unpack(FIELDS)),
    rcall("LRANGE", jobKey .. ":logs", 0, -1),
    rcall("ZSCORE", KEYS[1], jobId),
    none, none, none, none,
  }
  -- Only parents have children keys: one EXISTS instead of four reads for every other job.
  if rcall("EXISTS", links, processed, ignored, failed) > 0 then
    entry[4] = rcall("SMEMBERS", links)
    entry[5] = rcall("HGETALL", processed)
    entry[6] = rcall("HGETALL", ignored)
    entry[7] = rcall("ZRANGE", failed, 0, -1)
  end
  out[#out + 1] = entry
end
return cjson.encode(out)
