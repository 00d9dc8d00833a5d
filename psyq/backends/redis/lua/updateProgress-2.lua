-- updateProgress: store a job's progress and announce it.
-- KEYS: meta events
-- ARGV: [1] queue key prefix; [2] job id; [3] progress (JSON)
-- Events: progress (data = the JSON)
-- Returns: 0, or -1 (job missing)
--@include base
if rcall("EXISTS", P .. ARGV[2]) == 0 then return -1 end
rcall("HSET", P .. ARGV[2], "progress", ARGV[3])
emit("progress", "jobId", ARGV[2], "data", ARGV[3])
return 0
