-- Queue administration through the layout's functions.

-- name: pause
-- $1 queue, $2 paused. Events: paused | resumed.
SELECT pause($1::text, $2::boolean);

-- name: drain
-- $1 queue, $2 also delayed jobs.
SELECT drain($1::text, $2::boolean);

-- name: clean
-- $1 queue, $2 state, $3 grace ms, $4 most jobs (0: all) -> the ids removed.
SELECT cleaned.id
  FROM clean($1::text, $2::text,
             (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $3::bigint,
             $4::integer) AS cleaned(id);

-- name: obliterate
-- $1 queue, $2 most jobs per call, $3 force -> 0 done, 1 more to delete, -1 not
-- paused, -2 active jobs (without force).
SELECT obliterate($1::text, $2::integer, $3::boolean);

-- name: retry_jobs
-- $1 queue, $2 state, $3 most jobs (NULL: all), $4 finished before (ms) -> jobs moved.
SELECT retry_jobs($1::text, $2::text, $3::integer, $4::bigint);

-- name: promote_jobs
-- $1 queue, $2 most jobs (NULL: all) -> jobs moved.
SELECT promote_jobs($1::text, $2::integer);

-- name: rate_limit
-- $1 queue, $2 ms: hold the whole queue that long (the layout's limiter window, full).
SELECT set_rate_limit($1::text, $2::bigint,
                      (extract(epoch FROM clock_timestamp()) * 1000)::bigint);

-- name: rate_limit_ttl
-- $1 queue, $2 max jobs (0: the global limit's) -> ms the queue stays limited (0 when
-- not limited, -2 with no limit and no window).
SELECT rate_limit_ttl($1::text, $2::integer,
                      (extract(epoch FROM clock_timestamp()) * 1000)::bigint);

-- name: remove_rate_limit
-- $1 queue -> true when a limit in force was removed: the layout's limiter row goes (its
-- window and its count), as BullMQ's removeRateLimitKey deletes the limiter key.
WITH removed AS (
  DELETE FROM rate_limit WHERE queue = $1::text RETURNING expire_at_ms
)
SELECT coalesce(bool_or(expire_at_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint),
                false)
  FROM removed;

-- name: set_meta
-- $1 queue, $2 fields, $3 values: settings in the queue's meta rows (max, duration,
-- concurrency: read by every client's move_to_active).
INSERT INTO meta (queue, field, value)
SELECT $1, field, value FROM unnest($2::text[], $3::text[]) AS given(field, value)
ON CONFLICT (queue, field) DO UPDATE SET value = EXCLUDED.value;

-- name: remove_meta
-- $1 queue, $2 fields.
DELETE FROM meta WHERE queue = $1 AND field = ANY($2::text[]);

-- name: dedup_job
-- $1 queue, $2 deduplication id -> the id of the job holding it, while it lives.
SELECT job_id FROM dedup
 WHERE queue = $1 AND dedup_id = $2
   AND (expire_at_ms IS NULL
        OR expire_at_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint);

-- name: remove_dedup
-- $1 queue, $2 deduplication id, $3 job id (NULL: whichever holds it) -> the key, when
-- it was removed.
DELETE FROM dedup
 WHERE queue = $1 AND dedup_id = $2 AND ($3::text IS NULL OR job_id = $3)
RETURNING dedup_id;
