-- groupControl: change one group's own settings (groups.lua), keeping the rotation right.
-- KEYS: (none declared: the group's keys, built from ARGV)
-- ARGV: [1] queue key prefix; [2] group id; [3] what: "pause" | "resume" |
--       "concurrency" (ARGV[4]: n, "" = none of its own) | "limit" (ARGV[4] max, ARGV[5]
--       duration ms; "" = none of its own) | "ratelimit" (ARGV[4]: ms to take none)
-- Events: none
-- Returns: 1 changed, 0 already so (pause, resume); 1 for the others
--@include base groups
local gid, what, value = ARGV[2], ARGV[3], ARGV[4]
local optsKey = P .. "group-opts:" .. gid

local function setOwn(...)
  rcall("HSET", optsKey, ...)
  rcall("ZADD", P .. "groups", 0, gid)
end

local function settle()
  if hasLine(gid) then markGroupReady(gid) end
  forgetGroupIfEmpty(gid)
end

if what == "pause" then
  if rcall("HEXISTS", optsKey, "paused") == 1 then return 0 end
  setOwn("paused", 1)
  rcall("ZREM", P .. "groups:ready", gid)
  return 1
elseif what == "resume" then
  if rcall("HDEL", optsKey, "paused") == 0 then return 0 end
elseif what == "concurrency" then
  if value == "" then rcall("HDEL", optsKey, "concurrency") else setOwn("concurrency", value) end
elseif what == "limit" then
  if value == "" then rcall("HDEL", optsKey, "max", "duration") else setOwn("max", value, "duration", ARGV[5]) end
elseif what == "ratelimit" then
  local ms = tonumber(value)
  if ms > 0 then
    rcall("SET", groupLimiter(gid), GROUP_MANUAL, "PX", ms)
    parkGroup(gid, nowMs() + ms)
  else
    rcall("DEL", groupLimiter(gid))
    rcall("ZREM", P .. "groups:limited", gid)
  end
else
  return redis.error_reply("groupControl: unknown change " .. tostring(what))
end
settle()
return 1
