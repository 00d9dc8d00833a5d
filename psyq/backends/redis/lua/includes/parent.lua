-- Flows: what a child's end does to its parent (the parent may live in another queue: `P`
-- is switched to the parent's queue while it is updated). Needs base.lua and settle.lua.

local function withQueue(prefix, fn, ...)
  local saved = P
  P = prefix
  local a, b = fn(...)
  P = saved
  return a, b
end

-- A parent in waiting-children moves on: to delayed if it has a delay, else to waiting.
local function releaseParent(parentId, now)
  if not rcall("ZSCORE", P .. "waiting-children", parentId) then return end
  rcall("ZREM", P .. "waiting-children", parentId)
  local delay = tonumber(rcall("HGET", P .. parentId, "delay")) or 0
  delayOrWait(parentId, delay, now, "waiting-children")
end

local function maybeReleaseParent(parentId, now)
  if rcall("SCARD", P .. parentId .. ":dependencies") == 0 then releaseParent(parentId, now) end
end

local childFinished

local function failParent(parentId, childKey, now)
  if not rcall("ZSCORE", P .. "waiting-children", parentId) then return end
  rcall("ZREM", P .. "waiting-children", parentId)
  local reason = "child " .. childKey .. " failed"
  rcall("HINCRBY", P .. parentId, "atm", 1)
  rcall("HSET", P .. parentId, "finishedOn", now, "failedReason", reason)
  rcall("ZADD", P .. "failed", now, parentId)
  emit("failed", "jobId", parentId, "failedReason", reason, "prev", "waiting-children")
  childFinished(parentId, false, reason, now)
end

local function updateParent(childKey, parentId, completed, value, policy, now)
  local parentKey = P .. parentId
  if rcall("EXISTS", parentKey) == 0 then return end
  if completed then
    rcall("SREM", parentKey .. ":dependencies", childKey)
    rcall("HSET", parentKey .. ":processed", childKey, value)
    maybeReleaseParent(parentId, now)
  elseif policy == "fpof" then
    rcall("ZADD", parentKey .. ":unsuccessful", now, childKey)
    failParent(parentId, childKey, now)
  elseif policy == "cpof" then
    rcall("SREM", parentKey .. ":dependencies", childKey)
    rcall("ZADD", parentKey .. ":unsuccessful", now, childKey)
    releaseParent(parentId, now)
  elseif policy == "idof" then
    rcall("SREM", parentKey .. ":dependencies", childKey)
    rcall("HSET", parentKey .. ":failed", childKey, value)
    maybeReleaseParent(parentId, now)
  elseif policy == "rdof" then
    rcall("SREM", parentKey .. ":dependencies", childKey)
    maybeReleaseParent(parentId, now)
  else
    rcall("ZADD", parentKey .. ":unsuccessful", now, childKey)
  end
end

local function failurePolicy(opts)
  for _, name in ipairs({"fpof", "cpof", "idof", "rdof"}) do
    if opts[name] then return name end
  end
  return nil
end

-- Child `jobId` (of queue P), whose `parent` field is `raw` and decoded opts `opts` (read
-- only when it failed), completed (value = return value JSON) or failed for good.
local function notifyParent(jobId, raw, completed, value, opts, now)
  local parent = cjson.decode(raw)
  local policy = nil
  if not completed then policy = failurePolicy(opts()) end
  withQueue(parent.queueKey .. ":", updateParent, P .. jobId, parent.id, completed, value,
    policy, now)
end

childFinished = function(jobId, completed, value, now)
  local jobKey = P .. jobId
  local raw = rcall("HGET", jobKey, "parent")
  if not raw then return end
  notifyParent(jobId, raw, completed, value, function() return jobOpts(jobKey) end, now)
end

-- A child went away: it no longer holds its parent back.
local function childRemoved(jobId, now)
  local jobKey = P .. jobId
  local raw = rcall("HGET", jobKey, "parent")
  if not raw then return end
  local parent = cjson.decode(raw)
  withQueue(parent.queueKey .. ":", function()
    if rcall("SREM", P .. parent.id .. ":dependencies", jobKey) == 1 then
      maybeReleaseParent(parent.id, now)
    end
  end)
end
