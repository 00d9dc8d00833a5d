-- common: steps shared by several transitions (each transition is one transaction).
-- A holder that lets a job go (finish, retry, delay, hand back, wait for children) keeps
-- its token in lock_token with no expiry, so a renewal racing with it is not a lost lock;
-- stalled recovery clears the token.
-- Parameters: per statement ($1 is always the queue key "<prefix>:<queue>").
-- Effects: as named. Events: none here (transitions write them through events.sql).
-- Return codes: none; callers map a missing row to ErrorCode.JOB_MISSING and a wrong state
-- or token to NOT_IN_STATE / LOCK_MISSING / LOCK_MISMATCH.

-- name: now
SELECT now_ms();

-- name: ensure_queue
-- $1 qkey, $2 queue name
INSERT INTO queues (qkey, name) VALUES ($1, $2) ON CONFLICT (qkey) DO NOTHING;

-- name: queue
-- The queue row with the store's clock (no row: the queue was never written).
SELECT *, now_ms() AS now FROM queues WHERE qkey = $1;

-- name: get_job
SELECT * FROM jobs WHERE qkey = $1 AND id = $2;

-- name: lock_job
-- Lock a job row for the rest of the transaction.
SELECT * FROM jobs WHERE qkey = $1 AND id = $2 FOR UPDATE;

-- name: enqueue
-- $2 id, $3 to the front (lifo or handed back). The job becomes ready.
UPDATE jobs
SET state = CASE WHEN priority > 0 THEN 'prioritized' ELSE 'waiting' END,
    seq = CASE WHEN $3::boolean THEN -nextval('job_seq') ELSE nextval('job_seq') END,
    delay = 0, due = NULL, lock_expires = NULL, cancel_reason = NULL
WHERE qkey = $1 AND id = $2
RETURNING *;

-- name: delay
-- $2 id, $3 due ms, $4 delay ms
UPDATE jobs
SET state = 'delayed', due = $3, delay = $4, seq = nextval('job_seq'),
    lock_expires = NULL, cancel_reason = NULL
WHERE qkey = $1 AND id = $2
RETURNING *;

-- name: hold
-- $2 id. The job waits for its children.
UPDATE jobs
SET state = 'waiting-children', seq = nextval('job_seq'),
    lock_expires = NULL, cancel_reason = NULL
WHERE qkey = $1 AND id = $2
RETURNING *;

-- name: fail
-- $2 id, $3 reason, $4 stacktrace (JSON), $5 count an attempt. Fails a job for good.
UPDATE jobs
SET state = 'failed', failed_reason = $3, stacktrace = $4::text::jsonb,
    attempts_made = attempts_made + CASE WHEN $5::boolean THEN 1 ELSE 0 END,
    finished_on = now_ms(), seq = nextval('job_seq'),
    lock_token = NULL, lock_expires = NULL, cancel_reason = NULL
WHERE qkey = $1 AND id = $2
RETURNING *;

-- name: unstart
-- $2 id. A job handed back without running does not count as started.
UPDATE jobs SET attempts_started = greatest(0, attempts_started - 1) WHERE qkey = $1 AND id = $2;

-- name: drop_jobs
-- $2 ids. Deletes jobs with their logs, child links and (ttl-less) dedup keys.
WITH gone AS (
    DELETE FROM jobs WHERE qkey = $1 AND id = ANY($2::text[]) RETURNING *
), logs_gone AS (
    DELETE FROM logs WHERE qkey = $1 AND job_id = ANY($2::text[])
), links_gone AS (
    DELETE FROM deps WHERE parent_qkey = $1 AND parent_id = ANY($2::text[])
), keys_gone AS (
    DELETE FROM dedup WHERE qkey = $1 AND job_id = ANY($2::text[]) AND expires IS NULL
)
SELECT * FROM gone;

-- name: release_dedup
-- $2 job id. A job without a dedup ttl frees its key when it finishes.
DELETE FROM dedup WHERE qkey = $1 AND job_id = $2 AND expires IS NULL;

-- name: newest_beyond
-- $2 state, $3 how many to keep. Ids of older finished jobs past the newest $3.
SELECT id FROM jobs WHERE qkey = $1 AND state = $2 ORDER BY seq DESC OFFSET $3;

-- name: older_than
-- $2 state, $3 cutoff ms, $4 limit
SELECT id FROM jobs WHERE qkey = $1 AND state = $2 AND finished_on < $3 ORDER BY seq LIMIT $4;

-- name: count_metric
-- $2 kind (completed | failed), $3 how many
INSERT INTO metrics (qkey, kind, minute, count) VALUES ($1, $2, now_ms() / 60000, $3);

-- name: fold_metrics
-- One row per past minute (the events sequencer runs it); a week of minutes is kept.
WITH gone AS (
    DELETE FROM metrics WHERE qkey = $1 AND minute < now_ms() / 60000 RETURNING *
)
INSERT INTO metrics (qkey, kind, minute, count)
SELECT $1, kind, minute, sum(count) FROM gone
WHERE minute > now_ms() / 60000 - 7 * 24 * 60
GROUP BY kind, minute;
