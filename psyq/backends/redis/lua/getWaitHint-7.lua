-- getWaitHint: may a fetch take a job now? Read-only; used before blocking on the marker.
-- KEYS: wait prioritized delayed active meta limiter marker
-- ARGV: [1] queue key prefix
-- Events: none
-- Returns: 0 ready now; n > 0 ms until something may be ready (a delayed job, the limiter,
--          a limited group's window);
--          -1 nothing known
--@include base groups
metaStable = true -- see base.lua
if isPaused() or isMaxed() then return -1 end
if rcall("LLEN", P .. "wait") > 0 or rcall("ZCARD", P .. "prioritized") > 0
    or rcall("EXISTS", P .. "groups:ready") == 1 then
  return math.max(0, rcall("PTTL", P .. "limiter")) -- ready, unless a limiter holds it back
end
local now = nowMs()
local hint = nextGroupRelease(now) -- a limited group's window ends
local first = rcall("ZRANGE", P .. "delayed", 0, 0, "WITHSCORES")
if first[2] then
  local due = math.max(1, math.floor(tonumber(first[2]) / DELAY_SPAN) - now)
  if hint == nil or due < hint then hint = due end
end
return hint or -1
