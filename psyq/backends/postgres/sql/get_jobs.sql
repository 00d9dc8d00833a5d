-- get_jobs / get_job_counts / get_state: read-only queries.
-- Parameters: $1 qkey, others per statement. Effects: none. Events: none.

-- name: ids_in_state
-- $2 state. Ids in the order they run (or finished): prioritized by priority, delayed by
-- due time, others by sequence.
SELECT id FROM jobs
WHERE qkey = $1 AND state = $2
ORDER BY CASE WHEN $2 = 'prioritized' THEN priority ELSE 0 END,
         CASE WHEN $2 = 'delayed' THEN due ELSE 0 END,
         seq;

-- name: page_asc
-- $2 state, $3 offset, $4 limit (NULL: all). One state's jobs in the order of ids_in_state.
SELECT * FROM jobs
WHERE qkey = $1 AND state = $2
ORDER BY CASE WHEN $2 = 'prioritized' THEN priority ELSE 0 END,
         CASE WHEN $2 = 'delayed' THEN due ELSE 0 END,
         seq
OFFSET $3 LIMIT $4;

-- name: page_desc
-- As page_asc, newest (or last to run) first.
SELECT * FROM jobs
WHERE qkey = $1 AND state = $2
ORDER BY CASE WHEN $2 = 'prioritized' THEN priority ELSE 0 END DESC,
         CASE WHEN $2 = 'delayed' THEN due ELSE 0 END DESC,
         seq DESC
OFFSET $3 LIMIT $4;

-- name: by_ids
-- $2 ids
SELECT * FROM jobs WHERE qkey = $1 AND id = ANY($2::text[]);

-- name: counts
SELECT state, count(*) AS n FROM jobs WHERE qkey = $1 GROUP BY state;

-- name: is_paused
SELECT COALESCE((SELECT paused FROM queues WHERE qkey = $1), false);

-- name: counts_per_priority
-- $2 priorities. Priority 0 is the plain waiting jobs (a waiting job's priority is always 0),
-- any other the prioritized ones of that priority (their partial index).
SELECT p AS priority, CASE WHEN p = 0
    THEN (SELECT count(*) FROM jobs WHERE qkey = $1 AND state = 'waiting')
    ELSE (SELECT count(*) FROM jobs WHERE qkey = $1 AND state = 'prioritized' AND priority = p)
END AS n
FROM unnest($2::integer[]) AS p;

-- name: list_queues
-- $1 key prefix with its ':'
SELECT name FROM queues WHERE starts_with(qkey, $1) ORDER BY name;
