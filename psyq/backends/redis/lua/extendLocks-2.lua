-- extendLocks: renew the locks of active jobs held with the given tokens.
-- KEYS: active stalled
-- ARGV: [1] queue key prefix; [2] duration ms; then job id, token pairs
-- Events: none
-- Returns: the ids whose lock was lost (missing or held by another token)
local rcall = redis.call
local lost = {}
for i = 3, #ARGV, 2 do
  local jobId, token = ARGV[i], ARGV[i + 1]
  local lockKey = P .. jobId .. ":lock"
  if rcall("GET", lockKey) == token then
    rcall("PEXPIRE", lockKey, ARGV[2])
    rcall("SREM", P .. "stalled", jobId)
  else
    lost[#lost + 1] = jobId
  end
end
return lost
