-- removeDeduplicationKey: drop a deduplication key (only if it belongs to a job, when given).
-- KEYS: (the dedup key only, built from the prefix)
-- ARGV: [1] queue key prefix; [2] deduplication id; [3] owning job id or ""
-- Events: none
-- Returns: 1 removed, 0 missing or owned by another job
local key = P .. "de:" .. ARGV[2]
local owner = redis.call("GET", key)
if not owner or (ARGV[3] ~= "" and owner ~= ARGV[3]) then return 0 end
redis.call("DEL", key)
return 1
