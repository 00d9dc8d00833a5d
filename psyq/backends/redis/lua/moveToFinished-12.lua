-- moveToFinished: settle active jobs (complete, fail for good, or retry) and, when asked,
-- take the next jobs in the same call (fetch-next).
-- KEYS: wait active prioritized delayed completed failed marker meta events stalled limiter pc
-- ARGV: [1] queue key prefix; [2] JSON {settle = [{id, token, kind = completed|failed|retry,
--       value (returnvalue JSON or reason), stack (JSON array text), delay}], fetch = req?}
-- Events: completed / failed (prev=active), retries-exhausted, delayed / waiting
--         (prev=failed) for retries, parents' waiting / failed, active for fetched jobs,
--         drained when a fetch finds the queue empty, waiting (prev=active) for held jobs
--         handed back (fetch = the request moveToActive takes, `held` included)
-- Returns: {{code per settlement (0 ok, an ErrorCode, or "ERR <message>" when settling
--          that job raised an error)}, {fetched job hashes}}
--@include base groups jobkeys settle parent grouptake take finish
metaStable = true -- see base.lua
local now = nowMs()
local req = cjson.decode(ARGV[2])
local codes = {}
for i, item in ipairs(req.settle) do
  -- one job's error (say, opts another client wrote as bad JSON) fails that job alone
  local ok, result = pcall(settleJob, item, now)
  if ok then
    codes[i] = result
  elseif type(result) == "table" and result.err then
    codes[i] = "ERR " .. result.err
  else
    codes[i] = "ERR " .. tostring(result)
  end
end
flushGroupLeaves()
flushMetrics(now)
local fetched = {}
if req.fetch ~= nil and req.fetch ~= cjson.null then
  fetched = takeJobs(req.fetch, now)
  if #fetched == 0 and rcall("LLEN", P .. "wait") == 0 and rcall("ZCARD", P .. "prioritized") == 0 then
    emit("drained")
  end
end
return {codes, fetched}
