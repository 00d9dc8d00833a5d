-- extendLocks: renew the locks of active jobs held with the given tokens.
-- KEYS: active stalled
-- ARGV: [1] queue key prefix; [2] duration ms; then job id, token pairs
-- Events: none
-- Returns: the ids whose lock was lost: held by another token, or missing while the job is
--          not finished (a job that finished while this call was on its way is not lost)
local rcall = redis.call
local lost = {}
for i = 3, #ARGV, 2 do
  local jobId, token = ARGV[i], ARGV[i + 1]
  local lockKey = P .. jobId .. ":lock"
  local held = rcall("GET", lockKey)
  if held == token then
    rcall("PEXPIRE", lockKey, ARGV[2])
    rcall("SREM", P .. "stalled", jobId)
  elseif held or (rcall("EXISTS", P .. jobId) == 1 and rcall("HEXISTS", P .. jobId, "finishedOn") == 0) then
    lost[#lost + 1] = jobId
  end
end
return lost
