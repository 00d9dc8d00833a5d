-- wait_for_job: how long until a fetch may find a job (the wait itself is a LISTEN).
-- Parameters: $1 qkey. Effects: none. Events: none.
-- Returns: 0 when a job is ready now; ms until the next delayed job or the end of a rate
-- limit; NULL when only a notification can make one ready (paused, empty, at its global
-- concurrency).
WITH q AS (
    SELECT paused, limited_until, global_concurrency FROM queues WHERE qkey = $1
    UNION ALL SELECT false, 0, NULL
    LIMIT 1
)
SELECT CASE
    WHEN q.paused THEN NULL
    WHEN q.limited_until > now_ms() THEN q.limited_until - now_ms()
    WHEN q.global_concurrency IS NOT NULL AND (
        SELECT count(*) FROM jobs WHERE qkey = $1 AND state = 'active') >= q.global_concurrency
        THEN NULL
    WHEN EXISTS (SELECT 1 FROM jobs WHERE qkey = $1 AND state IN ('waiting', 'prioritized'))
        THEN 0
    ELSE (SELECT greatest(0, min(due) - now_ms()) FROM jobs WHERE qkey = $1 AND state = 'delayed')
END
FROM q;
