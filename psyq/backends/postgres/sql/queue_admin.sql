-- pause / resume / drain / clean / obliterate / retry_jobs / promote_jobs: queue admin.
-- Parameters: $1 qkey, others per statement. Effects: as named.
-- Events: paused, resumed, cleaned, waiting (prev completed|failed|delayed), via events.sql.

-- name: set_paused
-- $2 paused (the queue row exists: common.ensure_queue). Returns a row when the flag changed.
UPDATE queues SET paused = $2 WHERE qkey = $1 AND paused <> $2 RETURNING qkey;

-- name: ready_ids
-- $2 also delayed jobs
SELECT id FROM jobs
WHERE qkey = $1 AND (state IN ('waiting', 'prioritized') OR ($2::boolean AND state = 'delayed'));

-- name: cleanable
-- $2 state, $3 cutoff ms, $4 limit (NULL: all). Oldest first.
SELECT id FROM jobs
WHERE qkey = $1 AND state = $2
  AND COALESCE(CASE WHEN $2 IN ('completed', 'failed') THEN finished_on ELSE timestamp END, 0) <= $3
ORDER BY seq
LIMIT $4;

-- name: active_count
SELECT count(*) FROM jobs WHERE qkey = $1 AND state = 'active';

-- name: obliterate
WITH j AS (DELETE FROM jobs WHERE qkey = $1),
     l AS (DELETE FROM logs WHERE qkey = $1),
     d AS (DELETE FROM deps WHERE parent_qkey = $1),
     e AS (DELETE FROM events WHERE qkey = $1),
     k AS (DELETE FROM dedup WHERE qkey = $1),
     s AS (DELETE FROM schedulers WHERE qkey = $1),
     m AS (DELETE FROM metrics WHERE qkey = $1),
     w AS (DELETE FROM workers WHERE qkey = $1)
DELETE FROM queues WHERE qkey = $1;

-- name: finished_before
-- $2 state, $3 finished at or before ms, $4 limit (NULL: all)
SELECT id FROM jobs
WHERE qkey = $1 AND state = $2 AND COALESCE(finished_on, 0) <= $3
ORDER BY seq
LIMIT $4;

-- name: delayed_ids
-- $2 limit (NULL: all)
SELECT id FROM jobs WHERE qkey = $1 AND state = 'delayed' ORDER BY due, seq LIMIT $2;

-- name: reprocess
-- $2 id. A finished job forgets its result before it waits again.
UPDATE jobs
SET finished_on = NULL, processed_on = NULL,
    returnvalue = CASE WHEN state = 'completed' THEN NULL ELSE returnvalue END,
    failed_reason = CASE WHEN state = 'failed' THEN NULL ELSE failed_reason END
WHERE qkey = $1 AND id = $2;

-- name: rate_limit
-- $2 queue name, $3 delay ms
INSERT INTO queues (qkey, name, limited_until) VALUES ($1, $2, now_ms() + $3)
ON CONFLICT (qkey) DO UPDATE
SET limited_until = greatest(queues.limited_until, EXCLUDED.limited_until);

-- name: rate_limit_ttl
SELECT greatest(0, COALESCE((SELECT limited_until FROM queues WHERE qkey = $1), 0) - now_ms());

-- name: global_rate_limit
-- $2 queue name, $3 max (NULL: none), $4 duration
INSERT INTO queues (qkey, name, global_max, global_duration) VALUES ($1, $2, $3, $4)
ON CONFLICT (qkey) DO UPDATE
SET global_max = EXCLUDED.global_max, global_duration = EXCLUDED.global_duration;

-- name: global_concurrency
-- $2 queue name, $3 concurrency (NULL: none)
INSERT INTO queues (qkey, name, global_concurrency) VALUES ($1, $2, $3)
ON CONFLICT (qkey) DO UPDATE SET global_concurrency = EXCLUDED.global_concurrency;
