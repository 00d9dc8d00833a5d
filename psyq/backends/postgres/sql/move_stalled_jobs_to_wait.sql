-- move_stalled_jobs_to_wait: active jobs whose lease expired (lock_expires < now_ms()).
-- Parameters: $1 qkey. Effects: claims them (FOR UPDATE SKIP LOCKED, so two checkers never
-- move one job twice) and counts a stall; the caller puts each back at the front of the
-- line, or fails it past maxStalledCount (common.fail). Events: stalled, then waiting
-- (prev active) or failed. Returns: the claimed rows.
UPDATE jobs SET stalled_counter = stalled_counter + 1, lock_token = NULL
WHERE qkey = $1 AND id IN (
    SELECT id FROM jobs
    WHERE qkey = $1 AND state = 'active' AND lock_expires < now_ms()
    FOR UPDATE SKIP LOCKED)
RETURNING *;
