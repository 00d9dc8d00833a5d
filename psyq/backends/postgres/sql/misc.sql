-- get_deduplication_job_id / remove_deduplication_key / get_metrics / workers / cancel.
-- Parameters: $1 qkey, others per statement. Effects: as named. Events: none.

-- name: dedup_job
-- $2 dedup id
SELECT job_id FROM dedup
WHERE qkey = $1 AND dedup_id = $2 AND (expires IS NULL OR expires > now_ms());

-- name: dedup_remove
-- $2 dedup id, $3 job id (NULL: any)
DELETE FROM dedup WHERE qkey = $1 AND dedup_id = $2 AND ($3::text IS NULL OR job_id = $3)
RETURNING job_id;

-- name: metrics
-- $2 kind. Minutes newest first, with the total and the current minute.
SELECT minute, sum(count) AS count, now_ms() / 60000 AS now_minute FROM metrics
WHERE qkey = $1 AND kind = $2 GROUP BY minute ORDER BY minute DESC;

-- name: register_worker
-- $2 worker name, $3 info (JSON)
INSERT INTO workers (qkey, name, info, started) VALUES ($1, $2, $3::text::jsonb, now_ms())
ON CONFLICT (qkey, name) DO UPDATE SET info = EXCLUDED.info, started = EXCLUDED.started;

-- name: unregister_worker
DELETE FROM workers WHERE qkey = $1 AND name = $2;

-- name: workers
SELECT name, info::text AS info, started FROM workers WHERE qkey = $1 ORDER BY started, name;

-- name: cancel
-- $2 job id, $3 reason. Returns a row when the job was active.
UPDATE jobs SET cancel_reason = $3 WHERE qkey = $1 AND id = $2 AND state = 'active'
RETURNING id;

-- name: cancelled
-- $2 job ids
SELECT id, cancel_reason FROM jobs
WHERE qkey = $1 AND id = ANY($2::text[]) AND state = 'active' AND cancel_reason IS NOT NULL;
