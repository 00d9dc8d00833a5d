-- cancel_job: mark an active job cancelled; its worker sees it (get_cancelled) and stops it.
-- Parameters: $1 qkey, $2 job id, $3 reason. Returns: a row when the job was active.

-- $2 job id, $3 reason. Returns a row when the job was active.
UPDATE jobs SET cancel_reason = $3 WHERE qkey = $1 AND id = $2 AND state = 'active'
RETURNING id;
