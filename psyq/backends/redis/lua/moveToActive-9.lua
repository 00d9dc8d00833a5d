-- moveToActive: promote due delayed jobs, then lock up to #tokens ready jobs (plain waiting
-- before prioritized), honouring pause, the rate limiter and global concurrency.
-- KEYS: wait active prioritized delayed marker meta events limiter pc
-- ARGV: [1] queue key prefix; [2] JSON {tokens, lockDuration, worker, max?, duration?, held?}
--       (held: tokens of the caller's takes whose reply was lost: take.lua heldJobs)
-- Events: waiting (prev=delayed) for promoted jobs; active (prev=waiting) per job; waiting
--         (prev=active) for held jobs beyond #tokens, handed back
-- Returns: a list of job hashes (flat field/value lists ending "__id", id; held jobs first,
--          ending "__token", token)
--@include base groups grouptake take
metaStable = true -- see base.lua
return takeJobs(cjson.decode(ARGV[2]), nowMs())
