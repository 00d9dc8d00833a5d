-- pause / resume: BullMQ's layout: `wait` is renamed to `paused` and meta.paused is set.
-- KEYS: wait paused meta marker events delayed prioritized
-- ARGV: [1] queue key prefix; [2] "pause" or "resume"
-- Events: paused / resumed (only when the state changes)
-- Returns: 1 changed, 0 already so
--@include base
local pausing = ARGV[2] == "pause"
if pausing == isPaused() then return 0 end
local from, to = P .. "wait", P .. "paused"
if not pausing then from, to = to, from end
if rcall("EXISTS", from) == 1 then rcall("RENAME", from, to) end
if pausing then
  rcall("HSET", P .. "meta", "paused", 1)
  rcall("DEL", P .. "marker")
  emit("paused")
else
  rcall("HDEL", P .. "meta", "paused")
  if rcall("LLEN", to) > 0 or rcall("ZCARD", P .. "prioritized") > 0
      or rcall("EXISTS", P .. "groups:ready") == 1 then
    addBaseMarker()
  end
  addDelayMarker()
  emit("resumed")
end
return 1
