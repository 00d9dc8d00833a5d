-- getWaitHint: may a fetch take a job now? Read-only; used before blocking on the marker.
-- KEYS: wait prioritized delayed active meta limiter marker
-- ARGV: [1] queue key prefix
-- Events: none
-- Returns: 0 ready now; n > 0 ms until something may be ready (a delayed job, the limiter);
--          -1 nothing known
--@include base
metaStable = true -- see base.lua
if isPaused() or isMaxed() then return -1 end
if rcall("LLEN", P .. "wait") > 0 or rcall("ZCARD", P .. "prioritized") > 0 then
  return math.max(0, rcall("PTTL", P .. "limiter")) -- ready, unless a limiter holds it back
end
local first = rcall("ZRANGE", P .. "delayed", 0, 0, "WITHSCORES")
if first[2] then
  return math.max(1, math.floor(tonumber(first[2]) / DELAY_SPAN) - nowMs())
end
return -1
