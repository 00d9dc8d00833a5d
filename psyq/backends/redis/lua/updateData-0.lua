-- updateData: replace a job's data.
-- KEYS: (the job's keys only)
-- ARGV: [1] queue key prefix; [2] job id; [3] data (JSON)
-- Events: none
-- Returns: 0, or -1 (job missing)
if redis.call("EXISTS", P .. ARGV[2]) == 0 then return -1 end
redis.call("HSET", P .. ARGV[2], "data", ARGV[3])
return 0
