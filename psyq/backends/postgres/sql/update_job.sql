-- update_progress / update_data / change_priority / change_delay: job mutations.
-- Parameters: $1 qkey, $2 job id, others per statement. Effects: as named.
-- Events: progress (update_progress), delayed (change_delay), via events.sql.
-- Return codes: no row returned = JOB_MISSING.

-- name: progress
-- $3 progress (JSON)
UPDATE jobs SET progress = $3::text::jsonb WHERE qkey = $1 AND id = $2 RETURNING id;

-- name: data
-- $3 data (JSON text)
UPDATE jobs SET data = $3 WHERE qkey = $1 AND id = $2 RETURNING id;

-- name: priority
-- $3 priority. The caller re-enqueues a ready job (common.enqueue).
UPDATE jobs SET priority = $3, opts = opts || jsonb_build_object('priority', $3::integer)
WHERE qkey = $1 AND id = $2
RETURNING *;
