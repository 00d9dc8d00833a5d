-- moveToActive: promote due delayed jobs, then lock up to #tokens ready jobs (plain waiting
-- before prioritized), honouring pause, the rate limiter and global concurrency.
-- KEYS: wait active prioritized delayed marker meta events limiter pc
-- ARGV: [1] queue key prefix; [2] JSON {tokens, lockDuration, worker, max?, duration?}
-- Events: waiting (prev=delayed) for promoted jobs; active (prev=waiting) per job
-- Returns: a list of job hashes (flat field/value lists ending "__id", id)
--@include base take
metaStable = true -- see base.lua
return takeJobs(cjson.decode(ARGV[2]), nowMs())
