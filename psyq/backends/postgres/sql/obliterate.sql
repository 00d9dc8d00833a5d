-- obliterate: remove the queue and all its data; refused while jobs are active unless
-- forced (the caller checks active_count). Parameters: $1 qkey. Events: none.


-- name: active_count
SELECT count(*) FROM jobs WHERE qkey = $1 AND state = 'active';

-- name: remove
WITH j AS (DELETE FROM jobs WHERE qkey = $1),
     l AS (DELETE FROM logs WHERE qkey = $1),
     d AS (DELETE FROM deps WHERE parent_qkey = $1),
     e AS (DELETE FROM events WHERE qkey = $1),
     k AS (DELETE FROM dedup WHERE qkey = $1),
     s AS (DELETE FROM schedulers WHERE qkey = $1),
     m AS (DELETE FROM metrics WHERE qkey = $1),
     w AS (DELETE FROM workers WHERE qkey = $1),
     f AS (DELETE FROM queue_drained WHERE qkey = $1)
DELETE FROM queues WHERE qkey = $1;
