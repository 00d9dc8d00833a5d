-- update_data: replace a job's data.
-- Parameters: $1 qkey, $2 job id, $3 data (JSON text). Effects: jobs.data. Events: none.
-- Return codes: no row = JOB_MISSING.

-- $3 data (JSON text)
UPDATE jobs SET data = $3 WHERE qkey = $1 AND id = $2 RETURNING id;
