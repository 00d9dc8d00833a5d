-- change_priority: set a job's priority (and opts.priority); a ready job is re-enqueued by
-- the caller (common.enqueue, lifo honoured).
-- Parameters: $1 qkey, $2 job id, $3 priority. Events: none. Return codes: no row =
-- JOB_MISSING.

-- $3 priority. The caller re-enqueues a ready job (common.enqueue).
UPDATE jobs SET priority = $3, opts = opts || jsonb_build_object('priority', $3::integer)
WHERE qkey = $1 AND id = $2
RETURNING *;
