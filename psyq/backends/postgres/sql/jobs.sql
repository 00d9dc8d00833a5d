-- Changing one job: progress, data, logs, priority, delay, promotion, removal. Where the
-- layout has a function for it, the function is called (it writes the events).

-- name: progress
-- $1 queue, $2 id, $3 progress (JSON text) -> 1, or 0 when the job is missing.
-- Events: progress.
SELECT update_progress($1::text, $2::text, $3::jsonb);

-- name: data
-- $1 queue, $2 id, $3 data (JSON text) -> the id, or no row when the job is missing.
UPDATE job SET data = $3::jsonb WHERE queue = $1 AND id = $2 RETURNING id;

-- name: add_log
-- $1 queue, $2 id, $3 row -> the new row's index (fails on a missing job: the log's
-- foreign key).
INSERT INTO job_log (queue, job_id, idx, row)
SELECT $1, $2, COALESCE(max(idx) + 1, 0), $3
  FROM job_log WHERE queue = $1 AND job_id = $2
RETURNING idx;

-- name: keep_logs
-- $1 queue, $2 id, $3 rows to keep -> the job's log count afterwards.
WITH newest AS (
  SELECT max(idx) AS idx FROM job_log WHERE queue = $1 AND job_id = $2
), dropped AS (
  DELETE FROM job_log
   WHERE queue = $1 AND job_id = $2 AND idx <= (SELECT idx FROM newest) - $3::bigint
  RETURNING 1
)
SELECT (SELECT count(*) FROM job_log WHERE queue = $1 AND job_id = $2)
       - (SELECT count(*) FROM dropped);

-- name: log_count
-- $1 queue, $2 id -> the job's log count.
SELECT count(*) FROM job_log WHERE queue = $1 AND job_id = $2;

-- name: priority
-- $1 queue, $2 id, $3 priority, $4 lifo -> 0, or -1 when the job is missing.
SELECT change_priority($1::text, $2::text, $3::integer, $4::boolean);

-- name: delay
-- $1 queue, $2 id, $3 delay ms from now -> 0, -1 missing, -3 not delayed.
SELECT change_delay($1::text, $2::text, $3::bigint,
                    (extract(epoch FROM clock_timestamp()) * 1000)::bigint);

-- name: promote
-- $1 queue, $2 id -> 0, -1 missing, -3 not delayed.
SELECT promote($1::text, $2::text);

-- name: reprocess
-- $1 queue, $2 id, $3 state ('completed' | 'failed'), $4 attemptsMade back to 0, $5
-- attemptsStarted back to 0 -> 1, -1 missing, -3 not in it.
SELECT reprocess_job($1::text, $2::text, $3::text, false, $4::boolean, $5::boolean);

-- name: remove
-- $1 queue, $2 id, $3 remove children -> 1 removed, 0 not (missing or locked). The
-- layout's remove announces only the children it takes; the job's own "removed" event
-- (with the state it left, read from the statement's snapshot) is written here.
WITH before AS (
  SELECT CASE WHEN state = 'waiting' AND priority > 0 THEN 'prioritized'
              ELSE state::text END AS state
    FROM job WHERE queue = $1 AND id = $2
), gone AS (
  SELECT remove($1::text, $2::text, $3::boolean) AS n
)
SELECT gone.n,
       CASE WHEN gone.n = 1 THEN
         publish_event($1::text, 'removed', jsonb_build_object('jobId', $2::text, 'prev', before.state))
       END AS event
  FROM gone LEFT JOIN before ON true;
