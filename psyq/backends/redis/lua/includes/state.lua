-- The state of a job, from the structure that holds it. Needs base.lua.
local function inList(key, jobId)
  return rcall("LPOS", key, jobId) ~= false
end

local function jobState(jobId)
  for _, state in ipairs({"completed", "failed", "delayed", "prioritized", "waiting-children"}) do
    if rcall("ZSCORE", P .. state, jobId) then return state end
  end
  if inList(P .. "active", jobId) then return "active" end
  if inList(P .. "wait", jobId) or inList(P .. "paused", jobId) then return "waiting" end
  return "unknown"
end
