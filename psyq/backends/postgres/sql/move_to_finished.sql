-- move_to_finished: complete or fail active jobs held with their tokens, in one statement
-- for every job that finishes together (settle_many uses it for a batch).
-- Parameters: $1 qkey, $2 ids, $3 tokens ('0' skips the token check), $4 target states
-- (completed | failed), $5 return values, $6 failed reasons, $7 stacktraces (JSON).
-- Effects: attempts_made + 1, finishedOn = now_ms(), the lease is released; retention,
-- dedup keys, metrics and parents are handled by the caller in the same transaction.
-- Events: completed | failed (+ retries-exhausted). Return codes: jobs not returned are
-- JOB_MISSING, LOCK_MISSING (not active) or LOCK_MISMATCH (see lock_states).

-- name: finish
-- Also appends the metric counts and the events (completed | failed, retries-exhausted),
-- NOTIFYs readers, and returns the queue's global concurrency (gc) and the newest event
-- id (last_event). $8 channel.
WITH done AS (
    UPDATE jobs
    SET state = s.state, attempts_made = attempts_made + 1, finished_on = now_ms(),
        returnvalue = CASE WHEN s.state = 'completed' THEN s.rv ELSE jobs.returnvalue END,
        failed_reason = CASE WHEN s.state = 'failed' THEN s.reason ELSE jobs.failed_reason END,
        stacktrace = CASE WHEN s.state = 'failed' THEN s.stack::jsonb ELSE jobs.stacktrace END,
        lock_expires = NULL, cancel_reason = NULL, seq = nextval('job_seq')
    FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
         WITH ORDINALITY AS s(id, token, state, rv, reason, stack, ord)
    WHERE jobs.qkey = $1 AND jobs.id = s.id AND jobs.state = 'active'
      AND (s.token = '0' OR jobs.lock_token = s.token)
    RETURNING jobs.*, s.ord
), counted AS (
    INSERT INTO metrics (qkey, kind, minute, count)
    SELECT $1, state, now_ms() / 60000, count(*) FROM done GROUP BY state
), told AS (
    INSERT INTO events (qkey, ms, event, job_id, fields)
    SELECT $1, now_ms(), e.event, done.id, e.fields
    FROM done CROSS JOIN LATERAL (VALUES
        (1, done.state, CASE WHEN done.state = 'completed'
            THEN jsonb_build_object('returnvalue', done.returnvalue, 'prev', 'active')
            ELSE jsonb_build_object('failedReason', done.failed_reason, 'prev', 'active') END),
        (2, CASE WHEN done.state = 'failed'
                  AND done.attempts_made >= COALESCE((done.opts->>'attempts')::integer, 1)
            THEN 'retries-exhausted' END,
            jsonb_build_object('attemptsMade', done.attempts_made))
    ) AS e(k, event, fields)
    WHERE e.event IS NOT NULL
    ORDER BY done.ord, e.k
    RETURNING id
)
SELECT done.*,
       (SELECT global_concurrency FROM queues WHERE qkey = $1) AS gc,
       (SELECT max(id) FROM told) AS last_event,
       (SELECT notify_heard($8::text, 'e:' || $1)) AS notified
FROM done;

-- name: lock_states
-- $2 ids. What the jobs a transition could not take are (for the error of each).
SELECT id, state, lock_token FROM jobs WHERE qkey = $1 AND id = ANY($2::text[]);
