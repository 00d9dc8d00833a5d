-- addJobScheduler: create or replace a job scheduler ("upsert"), or add the run that follows
-- the one that just became active ("next"). A scheduler has exactly one pending job, id
-- `repeat:<schedulerId>:<millis>`; `repeat` scores each scheduler by the millis of its
-- current run (BullMQ's layout: its workers and ours read the current run from there).
-- KEYS: repeat delayed wait paused prioritized marker meta events id pc waiting-children
-- ARGV: [1] queue key prefix; [2] scheduler id; [3] mode (upsert|next);
--       [4] for next: the millis of the run that became active; for upsert: the scheduler
--       as the caller read it, "<millis of its current run>:<1 if that run was pending>"
--       ("" = no scheduler); [5] next millis ("" = none), chosen from what [4] says;
--       [6] scheduler hash fields JSON (upsert); [7] job meta JSON; [8] data; [9] opts
-- Events: removed (a replaced pending job), added + delayed / waiting for the new run,
--         duplicated (next: the run's job exists already)
-- Returns: the new pending job id, "" when none was added, or "stale" (upsert: the
--          scheduler is no longer as [4] says; nothing is written, read it again)
--@include base groups jobkeys settle parent state remove add
local schedulerId, mode, nextMillis = ARGV[2], ARGV[3], ARGV[5]
local hashKey = P .. "repeat:" .. schedulerId
local current = rcall("ZSCORE", P .. "repeat", schedulerId)
local now = nowMs()
if mode == "upsert" then
  local seen, pending = "", false
  if current then
    local oldJob = "repeat:" .. schedulerId .. ":" .. current
    local state = jobState(oldJob)
    pending = state == "delayed" or state == "waiting" or state == "prioritized"
    seen = current .. ":" .. (pending and "1" or "0")
  end
  if seen ~= ARGV[4] then return "stale" end
  if pending then removeJob("repeat:" .. schedulerId .. ":" .. current, false, now) end
  rcall("DEL", hashKey)
  local fields = cjson.decode(ARGV[6])
  for name, value in pairs(fields) do rcall("HSET", hashKey, name, tostring(value)) end
  rcall("HSET", hashKey, "ic", 0)
  if nextMillis == "" then
    rcall("ZADD", P .. "repeat", 0, schedulerId)
    return ""
  end
elseif rcall("EXISTS", hashKey) == 0 or current ~= ARGV[4] or nextMillis == "" then
  return "" -- removed, replaced, finished, or another worker already added the next run
end
local meta = cjson.decode(ARGV[7])
meta.id = "repeat:" .. schedulerId .. ":" .. nextMillis
meta.delay = math.max(0, tonumber(nextMillis) - now)
meta.ts = now
meta.rjk = schedulerId
local jobId, status = addJob(meta, ARGV[8], ARGV[9], now)
if status ~= 1 and mode == "next" then return "" end
rcall("HINCRBY", hashKey, "ic", 1)
rcall("ZADD", P .. "repeat", nextMillis, schedulerId)
return jobId
