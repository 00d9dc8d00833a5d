-- reprocess_job: a completed or failed job forgets its result before it waits again
-- (the caller checks its state, then enqueues it: common.enqueue).
-- Parameters: $1 qkey, $2 job id. Events: waiting (prev completed | failed), by the
-- caller. Return codes: NOT_IN_STATE when it is not in the given state (caller).

-- $2 id. A finished job forgets its result before it waits again.
UPDATE jobs
SET finished_on = NULL, processed_on = NULL,
    returnvalue = CASE WHEN state = 'completed' THEN NULL ELSE returnvalue END,
    failed_reason = CASE WHEN state = 'failed' THEN NULL ELSE failed_reason END
WHERE qkey = $1 AND id = $2;
