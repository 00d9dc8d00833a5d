-- add_log / clear_logs: append a log row to a job; keep only the newest rows.
-- Parameters: $1 qkey, $2 job id, others per statement. Events: none.
-- Return codes: add_log on a missing job is JOB_MISSING (checked by the caller).


-- name: append
-- $3 row. Returns the row count.
WITH added AS (
    INSERT INTO logs (qkey, job_id, row) VALUES ($1, $2, $3) RETURNING seq
)
SELECT count(*) + 1 FROM logs WHERE qkey = $1 AND job_id = $2;

-- name: keep_newest
-- $3 rows to keep
DELETE FROM logs WHERE qkey = $1 AND job_id = $2 AND seq IN (
    SELECT seq FROM logs WHERE qkey = $1 AND job_id = $2 ORDER BY seq DESC OFFSET $3);
