-- obliterate: delete every key of the queue (refused while jobs are active unless forced).
-- KEYS: active meta
-- ARGV: [1] queue key prefix; [2] force (1/0); [3] SCAN pattern matching the queue's keys
-- Events: none (the events stream goes too)
-- Returns: 0 done, or -3 with the active count when jobs are active and not forced
local rcall = redis.call
local active = rcall("LLEN", P .. "active")
if active > 0 and ARGV[2] ~= "1" then return {-3, active} end
local cursor = "0"
repeat
  local page = rcall("SCAN", cursor, "MATCH", ARGV[3], "COUNT", 1000)
  cursor = page[1]
  if #page[2] > 0 then rcall("DEL", unpack(page[2])) end
until cursor == "0"
return {0, 0}
