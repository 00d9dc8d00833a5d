-- The state of a job, from the structure that holds it. Needs base.lua, groups.lua.
-- LPOS needs Redis 6.0.6; older servers scan the list.
local function inList(key, jobId)
  local found = redis.pcall("LPOS", key, jobId)
  if type(found) == "table" and found.err then
    for _, id in ipairs(rcall("LRANGE", key, 0, -1)) do
      if id == jobId then return true end
    end
    return false
  end
  return found ~= false
end

-- Whether the job waits in its group's line (either part).
local function groupHolds(jobId)
  local gid = rcall("HGET", P .. jobId, "gid")
  if not gid then return false end
  return rcall("ZSCORE", groupLine(gid), jobId) ~= false or inList(groupFifo(gid), jobId)
end

local function jobState(jobId)
  for _, state in ipairs({"completed", "failed", "delayed", "prioritized", "waiting-children"}) do
    if rcall("ZSCORE", P .. state, jobId) then return state end
  end
  if inList(P .. "active", jobId) then return "active" end
  if inList(P .. "wait", jobId) or inList(P .. "paused", jobId) then return "waiting" end
  if groupHolds(jobId) then return "waiting" end
  return "unknown"
end
