-- moveStalledJobsToWait: active jobs without a lock (their worker died or hung) go back to
-- waiting, next in line, with stc + 1; past max stalled count they fail. Locks are set in
-- the same script that activates a job, so an active job without a lock is stalled. Then
-- every active id is noted in `stalled` (BullMQ's own checker reads it).
-- KEYS: active wait paused prioritized failed stalled marker meta events
-- ARGV: [1] queue key prefix; [2] max stalled count
-- Events: stalled; waiting (prev=active) or failed (+ retries-exhausted)
-- Returns: {{moved ids}, {failed ids}}
--@include base groups jobkeys settle parent finish
local STALLED_REASON = "job stalled more than allowable limit"
local now = nowMs()
local maxStalled = tonumber(ARGV[2])
local moved, failed = {}, {}
for _, jobId in ipairs(rcall("LRANGE", P .. "active", 0, -1)) do
  if rcall("EXISTS", P .. jobId .. ":lock") == 0 then
    leaveActive(jobId)
    local stc = rcall("HINCRBY", P .. jobId, "stc", 1)
    emit("stalled", "jobId", jobId)
    if stc > maxStalled then
      local stack = rcall("HGET", P .. jobId, "stacktrace") or "[]"
      finishJob(jobId, false, STALLED_REASON, stack, now)
      failed[#failed + 1] = jobId
    else
      toWait(jobId, "active", true)
      moved[#moved + 1] = jobId
    end
  end
end
flushMetrics(now)
local active = rcall("LRANGE", P .. "active", 0, -1)
rcall("DEL", P .. "stalled")
for i = 1, #active, 1000 do -- unpack has a stack limit: add in slices
  rcall("SADD", P .. "stalled", unpack(active, i, math.min(i + 999, #active)))
end
return {moved, failed}
