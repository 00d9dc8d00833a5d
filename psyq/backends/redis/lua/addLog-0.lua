-- addLog: append a row to a job's log, keeping the newest `keep` rows.
-- KEYS: (the job's keys only)
-- ARGV: [1] queue key prefix; [2] job id; [3] row; [4] keep ("" = all)
-- Events: none
-- Returns: the row count, or -1 (job missing)
local rcall = redis.call
local jobKey = P .. ARGV[2]
if rcall("EXISTS", jobKey) == 0 then return -1 end
local count = rcall("RPUSH", jobKey .. ":logs", ARGV[3])
local keep = tonumber(ARGV[4])
if keep ~= nil and count > keep then
  rcall("LTRIM", jobKey .. ":logs", -keep, -1)
  count = keep
end
return count
