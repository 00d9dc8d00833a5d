-- Taking grouped jobs, several per script call (take.lua). Needs base.lua, groups.lua.
-- The call takes what a take of one job at a time would: round-robin over the rotation
-- (each visit takes a group's next job and moves the group to the rotation's end), with
-- the same jobs in the same order, and leaves the rotation as those takes would. But it
-- reads the rotation with one ZRANGE, pops each group's jobs of the call at once (popLine),
-- raises each group's count with one HINCRBY and writes the rotation back once at its end.

-- A group read from the rotation, if it may start a job now: what it may start in this
-- call (`room`, nil without a bound) and its limits. Else it leaves the rotation (paused;
-- full, into groups:full; limited, into groups:limited until its window ends) and nil.
-- Without a rate limit the window is not read: rate_limit_group(ms) parks the group in
-- groups:limited for those ms.
local function openGroup(gid, req, now, out)
  local opts = groupOpts(gid)
  if opts.paused then
    out.gone[#out.gone + 1] = gid
    return nil
  end
  local concurrency = opts.concurrency or req.gconc
  local max, duration = req.gmax, req.gduration
  if opts.max ~= nil then max, duration = opts.max, opts.duration end
  local group = {gid = gid, concurrency = concurrency, max = max, duration = duration,
    asked = 0, ids = {}, used = 0, emptied = false}
  if concurrency ~= nil then
    local room = concurrency - groupActive(gid)
    if room <= 0 then
      out.gone[#out.gone + 1] = gid
      out.full[#out.full + 1] = gid
      return nil
    end
    group.room = room
  end
  if max ~= nil then
    local ttl = rcall("PTTL", groupLimiter(gid)) -- a script's clock stands still: reused
    local started = 0
    if ttl > 0 then started = tonumber(rcall("GET", groupLimiter(gid))) or 0 end
    if started >= max then
      out.gone[#out.gone + 1] = gid
      out.parked[#out.parked + 1] = now + ttl
      out.parked[#out.parked + 1] = gid
      return nil
    end
    group.ttl = ttl
    if group.room == nil or max - started < group.room then group.room = max - started end
  end
  return group
end

-- Plans `need` visits over `groups` from index `at` (round and round when `cycle`, else up
-- to the end), each to a group with room left, appending them to `visits`; returns the
-- index the next visit would start from.
local function planVisits(groups, at, need, cycle, visits)
  local i, passed = at, 0
  while need > 0 and passed < #groups do
    if i > #groups then
      if not cycle then break end
      i = 1
    end
    local group = groups[i]
    if not group.emptied and (group.room == nil or group.asked < group.room) then
      group.asked = group.asked + 1
      visits[#visits + 1] = group
      need = need - 1
      passed = 0
    else
      passed = passed + 1
    end
    i = i + 1
  end
  return i
end

-- Pops what the visits asked of each group (popLine, once per group), then takes the visits
-- in order: a visit to a group whose line ran out takes nothing (the group is emptied, as
-- a take of one job would find it). Returns how many visits took nothing.
local function takeVisits(groups, visits, ids, state)
  for _, group in ipairs(groups) do
    local short = group.asked - #group.ids
    if short > 0 and not group.emptied then
      local popped = popLine(group.gid, short)
      for _, id in ipairs(popped) do group.ids[#group.ids + 1] = id end
      if #popped < short then
        group.emptied = true
        group.asked = #group.ids
      end
    end
  end
  local missed = 0
  for _, group in ipairs(visits) do
    if group.used < #group.ids then
      group.used = group.used + 1
      ids[#ids + 1] = group.ids[group.used]
      state.last = group.index
    else
      missed = missed + 1
    end
  end
  return missed
end

-- After the call's visits: each group that started jobs counts them (active, its window)
-- and goes to the rotation's end, or leaves it (window full: limited; at its concurrency:
-- full; its line found empty). An emptied group that started a job stays, as after a take
-- of one job: it goes when a take finds its line empty or its last active job leaves.
local function settleGroups(groups, now, out)
  local kept = {}
  for _, group in ipairs(groups) do
    local n = #group.ids
    if n == 0 then
      if group.emptied then -- found empty: it leaves, and goes if it has no active job
        out.gone[#out.gone + 1] = group.gid
        out.empty[#out.empty + 1] = group.gid
      end
    else
      local active = rcall("HINCRBY", P .. "groups:active", group.gid, count(n))
      local windowFull, ends = false, 0
      if group.max ~= nil then
        local key, started, ttl = groupLimiter(group.gid), n, group.ttl
        if ttl > 0 then
          started = rcall("INCRBY", key, n)
        else
          rcall("SET", key, n, "PX", group.duration)
          ttl = group.duration
        end
        windowFull, ends = started >= group.max, now + math.max(1, ttl)
      end
      if windowFull then
        out.gone[#out.gone + 1] = group.gid
        out.parked[#out.parked + 1] = ends
        out.parked[#out.parked + 1] = group.gid
      elseif group.concurrency ~= nil and active >= group.concurrency then
        out.gone[#out.gone + 1] = group.gid
        out.full[#out.full + 1] = group.gid
      elseif group.emptied then
        out.gone[#out.gone + 1] = group.gid
      else
        kept[group.index] = true
      end
    end
  end
  return kept
end

-- The rotation written back: the groups that leave it out, the kept ones at its end in
-- the order of their last visit (`whole`: the call saw the whole rotation, so the visits
-- went round it and the last one visited goes last).
local function writeRotation(groups, kept, whole, last, out)
  inSlices("ZREM", P .. "groups:ready", out.gone)
  if #out.full > 0 then inSlices("SADD", P .. "groups:full", out.full) end
  for first = 1, #out.parked, 1000 do
    rcall("ZADD", P .. "groups:limited", unpack(out.parked, first, math.min(first + 999, #out.parked)))
  end
  local order = {}
  if whole and last ~= nil then
    for i = last + 1, #groups do order[#order + 1] = i end
    for i = 1, last do order[#order + 1] = i end
  else
    for i = 1, #groups do order[i] = i end
  end
  local scored = {}
  for _, i in ipairs(order) do
    if kept[i] then
      scored[#scored + 1] = nextGroupSeq()
      scored[#scored + 1] = groups[i].gid
    end
  end
  for first = 1, #scored, 1000 do
    rcall("ZADD", P .. "groups:ready", unpack(scored, first, math.min(first + 999, #scored)))
  end
  for _, gid in ipairs(out.empty) do forgetGroupIfEmpty(gid) end
  return #scored > 0
end

-- Up to `want` grouped jobs moved to active, appended to `ids` in the order taken; returns
-- whether the rotation still holds a group.
local function takeGrouped(req, now, want, ids)
  local first = #ids
  local groups, out = {}, {gone = {}, full = {}, parked = {}, empty = {}}
  local state = {}
  local read, whole, at = 0, false, 1
  while #ids - first < want do
    local need = want - (#ids - first)
    if not whole then -- the rotation's next groups, as many as jobs are still wanted
      -- no scores: Redis writes each as a decimal (sprintf), and only the last is needed
      local gids = rcall("ZRANGE", P .. "groups:ready", count(read), count(read + need - 1))
      read = read + #gids
      if #gids < need then whole = true end
      loadGroupOpts(gids)
      at = #groups + 1
      for _, gid in ipairs(gids) do
        local group = openGroup(gid, req, now, out)
        if group then
          groups[#groups + 1] = group
          group.index = #groups
        end
      end
    end
    local visits = {}
    at = planVisits(groups, at, need, whole, visits)
    if #visits == 0 then
      if whole then break end
    else
      takeVisits(groups, visits, ids, state)
    end
  end
  local taken = #ids - first
  if taken > 0 then
    for i = first + 1, #ids, 1000 do
      rcall("LPUSH", P .. "active", unpack(ids, i, math.min(i + 999, #ids)))
    end
    countGroupWaiting(-taken)
  end
  local kept = settleGroups(groups, now, out)
  local more = writeRotation(groups, kept, whole, state.last, out)
  return more or not whole
end
