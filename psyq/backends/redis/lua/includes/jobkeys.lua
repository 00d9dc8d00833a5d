-- A job's keys going away: its dedup key freed, its hash and sub-keys deleted. Needs
-- base.lua. (Apart from settle.lua so that the add scripts, which need only these, do not
-- make settle's functions on every call.)
-- A job without a dedup ttl frees its key when it finishes or goes away.
local function releaseDedupKey(jobId, dedupId)
  local key = P .. "de:" .. dedupId
  if rcall("PTTL", key) == -1 and rcall("GET", key) == jobId then
    rcall("DEL", key)
  end
end

local function releaseDedup(jobId)
  local dedupId = rcall("HGET", P .. jobId, "deid")
  if dedupId then releaseDedupKey(jobId, dedupId) end
end

local function removeJobKeys(jobId)
  local jobKey = P .. jobId
  releaseDedup(jobId)
  rcall("DEL", jobKey, jobKey .. ":logs", jobKey .. ":lock", jobKey .. ":dependencies",
    jobKey .. ":processed", jobKey .. ":failed", jobKey .. ":unsuccessful")
end
