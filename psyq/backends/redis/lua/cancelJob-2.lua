-- cancelJob: mark an active job as cancelled; its worker sees the mark and stops it.
-- KEYS: active cancelled
-- ARGV: [1] queue key prefix; [2] job id; [3] reason
-- Events: none
-- Returns: 1 marked, 0 not active
--@include base groups state
if not inList(P .. "active", ARGV[2]) then return 0 end
redis.call("HSET", P .. "cancelled", ARGV[2], ARGV[3])
return 1
