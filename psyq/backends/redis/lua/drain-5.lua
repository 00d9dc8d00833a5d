-- drain: remove waiting (the groups' too) and prioritized jobs (and delayed ones when asked).
-- KEYS: wait paused prioritized delayed pc
-- (the priority counter pc is kept, as BullMQ keeps it)
-- ARGV: [1] queue key prefix; [2] also delayed (1/0)
-- Events: none
-- Returns: how many jobs were removed
--@include base groups jobkeys settle
local removed = 0
local function dropAll(ids)
  for _, jobId in ipairs(ids) do removeJobKeys(jobId) end
  removed = removed + #ids
end
for _, list in ipairs({"wait", "paused"}) do
  dropAll(rcall("LRANGE", P .. list, 0, -1))
  rcall("DEL", P .. list)
end
emptyGroupLines(dropAll)
local sets = {"prioritized"}
if ARGV[2] == "1" then sets[2] = "delayed" end
for _, set in ipairs(sets) do
  dropAll(rcall("ZRANGE", P .. set, 0, -1))
  rcall("DEL", P .. set)
end
return removed
