-- Removing a job that is not being processed, with its children. Needs base, settle,
-- parent, state.

local function detach(jobId, state)
  if state == "waiting" then
    if groupDetach(jobId) then return end
    rcall("LREM", P .. "wait", 0, jobId)
    rcall("LREM", P .. "paused", 0, jobId)
  elseif state ~= "unknown" and state ~= "active" then
    rcall("ZREM", P .. state, jobId)
  end
end

local function childKeys(jobKey)
  local keys = rcall("SMEMBERS", jobKey .. ":dependencies")
  for _, key in ipairs(rcall("HKEYS", jobKey .. ":processed")) do keys[#keys + 1] = key end
  for _, key in ipairs(rcall("HKEYS", jobKey .. ":failed")) do keys[#keys + 1] = key end
  for _, key in ipairs(rcall("ZRANGE", jobKey .. ":unsuccessful", 0, -1)) do
    keys[#keys + 1] = key
  end
  return keys
end

local removeTree

-- childKey = "<prefix>:<queue>:<id>"; queue names and prefixes hold no ':'.
local function removeChild(childKey)
  local queueKey, childId = string.match(childKey, "^(.*):([^:]+)$")
  withQueue(queueKey .. ":", function()
    if rcall("EXISTS", P .. childId) == 1 and rcall("EXISTS", P .. childId .. ":lock") == 0 then
      local state = jobState(childId)
      if state ~= "active" then
        removeTree(childId)
        detach(childId, state)
        removeJobKeys(childId)
        emit("removed", "jobId", childId, "prev", state)
      end
    end
  end)
end

removeTree = function(jobId)
  for _, key in ipairs(childKeys(P .. jobId)) do removeChild(key) end
end

-- Returns the state the job was removed from, or nil when missing or active.
local function removeJob(jobId, withChildren, now)
  if rcall("EXISTS", P .. jobId) == 0 or rcall("EXISTS", P .. jobId .. ":lock") == 1 then
    return nil
  end
  local state = jobState(jobId)
  if state == "active" then return nil end
  if withChildren then removeTree(jobId) end
  detach(jobId, state)
  childRemoved(jobId, now)
  removeJobKeys(jobId)
  emit("removed", "jobId", jobId, "prev", state)
  return state
end
