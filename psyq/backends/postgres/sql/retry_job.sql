-- retry_job: a failed attempt with attempts left goes back to waiting (or delayed).
-- Parameters: $1 qkey, $2 id, $3 reason, $4 stacktrace (JSON). Effects: attempts_made + 1,
-- failedReason and stacktrace set; the caller then enqueues (common.enqueue, lifo honoured)
-- or delays (common.delay) the job. Events: waiting (prev failed) | delayed.
-- Return codes: JOB_MISSING, LOCK_MISSING, LOCK_MISMATCH (checked on the locked row).
UPDATE jobs
SET attempts_made = attempts_made + 1, failed_reason = $3, stacktrace = $4::text::jsonb
WHERE qkey = $1 AND id = $2
RETURNING *;
