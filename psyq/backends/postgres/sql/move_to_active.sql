-- move_to_active: promote due delayed jobs, then take up to n ready jobs and lock them.
-- Parameters: per statement ($1 qkey). Effects: due delayed jobs become waiting/prioritized;
-- taken jobs become active with a lease (token + expiry from now_ms()); rows are claimed
-- with FOR UPDATE SKIP LOCKED, so concurrent workers never wait on each other nor take a
-- job twice. Order: plain waiting (priority 0) before prioritized, then priority, then
-- sequence (lifo jobs have negative sequences). Limits lock the queue row.
-- Events: waiting (prev delayed), active, drained. Returns: the taken rows with rn, the
-- index of each job's token.

-- name: promote_and_queue
-- Due delayed jobs become ready; returns the queue row (qkey NULL: no row), the store's
-- clock and the promoted ids.
WITH promoted AS (
    UPDATE jobs
    SET state = CASE WHEN priority > 0 THEN 'prioritized' ELSE 'waiting' END,
        delay = 0, due = NULL,
        seq = CASE WHEN (opts->>'lifo')::boolean THEN -nextval('job_seq')
                   ELSE nextval('job_seq') END
    WHERE qkey = $1 AND id IN (
        SELECT id FROM jobs
        WHERE qkey = $1 AND state = 'delayed' AND due <= now_ms()
        ORDER BY due
        LIMIT 1000
        FOR UPDATE SKIP LOCKED)
    RETURNING id
)
SELECT q.*, COALESCE(d.drained, true) AS drained, now_ms() AS now,
       ARRAY(SELECT id FROM promoted) AS promoted
FROM (SELECT 1) AS one
     LEFT JOIN queues q ON q.qkey = $1
     LEFT JOIN queue_drained d ON d.qkey = $1;

-- name: queue_locked
SELECT q.*, COALESCE(d.drained, true) AS drained, now_ms() AS now
FROM queues q LEFT JOIN queue_drained d ON d.qkey = q.qkey
WHERE q.qkey = $1
FOR UPDATE OF q;

-- name: active_count
SELECT count(*) FROM jobs WHERE qkey = $1 AND state = 'active';

-- name: take
-- $2 tokens, $3 lock duration ms, $4 worker name, $5 how many, $6 channel, $7 whether the
-- queue was drained (then a take that takes jobs clears the flag; the flag has its own row,
-- queue_drained, so the queue row stays free for adds). Also appends the
-- active events and NOTIFYs readers; last_event is the newest event id.
-- Plain waiting jobs first (jobs_by_state, by sequence), then prioritized ones (their
-- partial index, by priority and sequence): the second read runs only if the first found
-- fewer than $5.
WITH picked AS (
    SELECT id, row_number() OVER (ORDER BY priority, seq) AS rn
    FROM (
        SELECT * FROM (
            SELECT id, priority, seq FROM jobs
            WHERE qkey = $1 AND state = 'waiting'
            ORDER BY seq
            LIMIT $5
            FOR UPDATE SKIP LOCKED
        ) AS waiting
        UNION ALL
        SELECT * FROM (
            SELECT id, priority, seq FROM jobs
            WHERE qkey = $1 AND state = 'prioritized'
            ORDER BY priority, seq
            LIMIT $5
            FOR UPDATE SKIP LOCKED
        ) AS prioritized
        LIMIT $5
    ) AS ready
), taken AS (
    UPDATE jobs
    SET state = 'active', lock_token = ($2::text[])[picked.rn], lock_expires = now_ms() + $3,
        processed_on = now_ms(), attempts_started = attempts_started + 1, processed_by = $4,
        seq = nextval('job_seq')
    FROM picked
    WHERE jobs.qkey = $1 AND jobs.id = picked.id
    RETURNING jobs.*, picked.rn
), told AS (
    INSERT INTO events (qkey, ms, event, job_id, fields)
    SELECT $1, now_ms(), 'active', taken.id, '{"prev": "waiting"}'::jsonb
    FROM taken ORDER BY taken.rn
    RETURNING id
), busy AS (
    INSERT INTO queue_drained (qkey, drained)
    SELECT $1, false WHERE $7::boolean AND EXISTS (SELECT 1 FROM taken)
    ON CONFLICT (qkey) DO UPDATE SET drained = false WHERE queue_drained.drained
)
SELECT taken.*,
       (SELECT max(id) FROM told) AS last_event,
       (SELECT notify_heard($6::text, 'e:' || $1)) AS notified
FROM taken;

-- name: count_window
-- $2 window start, $3 jobs taken in the window, $4 limited until
UPDATE queues SET window_start = $2, window_count = $3, limited_until = $4 WHERE qkey = $1;

-- name: mark_drained
-- $2 channel. When the queue just became drained, appends the drained event, NOTIFYs
-- readers and returns one row (last_event: the event's id); else no row.
WITH flipped AS (
    UPDATE queue_drained SET drained = true
    WHERE qkey = $1 AND NOT drained
      AND NOT EXISTS (SELECT 1 FROM jobs WHERE qkey = $1 AND state IN ('waiting', 'prioritized'))
    RETURNING qkey
), told AS (
    INSERT INTO events (qkey, ms, event) SELECT $1, now_ms(), 'drained' FROM flipped
    RETURNING id
)
SELECT told.id AS last_event, notify_heard($2::text, 'e:' || $1) AS notified FROM told;
