-- exportJobs: everything export_jobs reads about a page of jobs, in one call (instead of
-- seven commands per job through the client).
-- KEYS: delayed
-- ARGV: [1] queue key prefix; [2..] job ids
-- Events: none
-- Returns: per job id, in order: {hash as a flat field/value list, logs, delayed score (nil
--          when not delayed), pending children keys, processed children (flat), ignored
--          children (flat, the :failed hash), failed children keys (:unsuccessful)}
--@include base
local out = {}
for i = 2, #ARGV do
  local jobId = ARGV[i]
  local jobKey = P .. jobId
  out[#out + 1] = {
    rcall("HGETALL", jobKey),
    rcall("LRANGE", jobKey .. ":logs", 0, -1),
    rcall("ZSCORE", KEYS[1], jobId),
    rcall("SMEMBERS", jobKey .. ":dependencies"),
    rcall("HGETALL", jobKey .. ":processed"),
    rcall("HGETALL", jobKey .. ":failed"),
    rcall("ZRANGE", jobKey .. ":unsuccessful", 0, -1),
  }
end
return out
