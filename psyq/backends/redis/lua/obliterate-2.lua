-- obliterate: delete the queue, up to ARGV[3] jobs per call (the caller repeats until it
-- returns 0), then the queue's own keys. Refused while jobs are active unless forced.
-- Works from the queue's structures, never SCAN, so Redis is held for one batch at a time.
-- KEYS: active meta
-- ARGV: [1] queue key prefix; [2] force (1/0); [3] batch size
-- Events: none (the events stream goes too)
-- Returns: {0, 0} done; {1, n} n jobs deleted, call again; {-3, active count} refused
--@include base groups jobkeys settle
local active = rcall("LLEN", P .. "active")
if active > 0 and ARGV[2] ~= "1" then return {-3, active} end
local budget = tonumber(ARGV[3])
local deleted = 0
local function dropJobs(ids)
  for _, jobId in ipairs(ids) do removeJobKeys(jobId) end
  deleted = deleted + #ids
end
for _, list in ipairs({"active", "wait", "paused"}) do
  while deleted < budget do
    local ids = rcall("LRANGE", P .. list, 0, budget - deleted - 1)
    if #ids == 0 then break end
    dropJobs(ids)
    rcall("LTRIM", P .. list, #ids, -1)
  end
end
for _, set in ipairs({"prioritized", "delayed", "completed", "failed", "waiting-children"}) do
  while deleted < budget do
    local ids = rcall("ZRANGE", P .. set, 0, budget - deleted - 1)
    if #ids == 0 then break end
    dropJobs(ids)
    rcall("ZREM", P .. set, unpack(ids))
  end
end
if deleted < budget then obliterateGroups(dropJobs, budget - deleted) end
if deleted >= budget then return {1, deleted} end
for _, schedulerId in ipairs(rcall("ZRANGE", P .. "repeat", 0, -1)) do
  rcall("DEL", P .. "repeat:" .. schedulerId)
end
rcall("DEL", P .. "wait", P .. "paused", P .. "active", P .. "prioritized", P .. "delayed",
  P .. "completed", P .. "failed", P .. "waiting-children", P .. "marker", P .. "meta",
  P .. "events", P .. "id", P .. "pc", P .. "stalled", P .. "stalled-check", P .. "limiter",
  P .. "repeat", P .. "metrics:completed", P .. "metrics:completed:data", P .. "metrics:failed",
  P .. "metrics:failed:data", P .. "workers", P .. "cancelled")
return {0, 0}
