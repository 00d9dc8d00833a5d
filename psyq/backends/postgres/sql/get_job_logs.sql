-- get_job_logs: a job's log rows, oldest first (the caller slices and orders).
-- Parameters: $1 qkey, $2 job id. Effects: none.

SELECT row FROM logs WHERE qkey = $1 AND job_id = $2 ORDER BY seq;
