-- clean: remove up to `limit` jobs of a state older than the grace time (through
-- common.drop_jobs). Parameters: $1 qkey, $2 state, $3 cutoff ms, $4 limit (NULL: all).
-- Events: cleaned (written by the caller). Returns: the ids, oldest first.

-- $2 state, $3 cutoff ms, $4 limit (NULL: all). Oldest first.
SELECT id FROM jobs
WHERE qkey = $1 AND state = $2
  AND COALESCE(CASE WHEN $2 IN ('completed', 'failed') THEN finished_on ELSE timestamp END, 0) <= $3
ORDER BY seq
LIMIT $4;
