-- Finishing and retrying one active job. Needs base, settle, parent.

-- keep: the worker's removeOnComplete/removeOnFail, for a job without its own (or nil).
local function finishJob(jobId, completed, value, stack, now, keep)
  local jobKey = P .. jobId
  local read = rcall("HMGET", jobKey, "opts", "parent", "deid", "atm") -- one read, one write
  local atm = (tonumber(read[4]) or 0) + 1
  local kind = "failed"
  if completed then kind = "completed" end
  if completed then
    rcall("HSET", jobKey, "atm", atm, "finishedOn", now, "returnvalue", value)
  else
    rcall("HSET", jobKey, "atm", atm, "finishedOn", now, "failedReason", value,
      "stacktrace", stack)
  end
  rcall("ZADD", P .. kind, now, jobId)
  collectMetrics(kind)
  local opts = {}
  if read[1] and read[1] ~= "" then opts = cjson.decode(read[1]) end
  if completed then
    emit("completed", "jobId", jobId, "returnvalue", value, "prev", "active")
  else
    emit("failed", "jobId", jobId, "failedReason", value, "prev", "active")
    if atm >= (tonumber(opts.attempts) or 1) then
      emit("retries-exhausted", "jobId", jobId, "attemptsMade", atm)
    end
  end
  if read[2] then notifyParent(jobId, read[2], completed, value, function() return opts end, now) end
  if read[3] then releaseDedupKey(jobId, read[3]) end
  local own = opts.removeOnFail
  if completed then own = opts.removeOnComplete end
  if own == nil then own = keep end
  retain(P .. kind, own, jobId, now)
end

local function retryJob(jobId, reason, stack, delay, now)
  local jobKey = P .. jobId
  rcall("HINCRBY", jobKey, "atm", 1)
  rcall("HSET", jobKey, "failedReason", reason, "stacktrace", stack)
  if delay > 0 then rcall("HSET", jobKey, "delay", delay) end
  delayOrWait(jobId, delay, now, "failed")
end

-- item = {id, token, kind, value, stack, delay, keep}; returns 0 or an ErrorCode.
local function settleJob(item, now)
  local code = checkLock(item.id, item.token)
  if code == 0 then code = leaveActive(item.id) end
  if code ~= 0 then return code end
  if item.kind == "retry" then
    retryJob(item.id, item.value, item.stack or "[]", tonumber(item.delay) or 0, now)
  else
    finishJob(item.id, item.kind == "completed", item.value, item.stack or "[]", now, item.keep)
  end
  return 0
end
