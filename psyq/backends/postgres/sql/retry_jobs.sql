-- retry_jobs: finished jobs (of one state) back to waiting, through reprocess_job.
-- Parameters: $1 qkey, $2 state, $3 finished at or before ms, $4 limit (NULL: all).
-- Events: those of reprocess_job. Returns: the ids, oldest first.

-- $2 state, $3 finished at or before ms, $4 limit (NULL: all)
SELECT id FROM jobs
WHERE qkey = $1 AND state = $2 AND COALESCE(finished_on, 0) <= $3
ORDER BY seq
LIMIT $4;
