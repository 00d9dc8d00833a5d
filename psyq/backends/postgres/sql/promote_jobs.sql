-- promote_jobs: delayed jobs to waiting, soonest first (each through promote).
-- Parameters: $1 qkey, $2 limit (NULL: all). Events: waiting (prev delayed), by the caller.
-- Returns: the ids.

-- $2 limit (NULL: all)
SELECT id FROM jobs WHERE qkey = $1 AND state = 'delayed' ORDER BY due, seq LIMIT $2;
