-- Job schedulers: the layout's `scheduler` rows and their pending `repeat:<id>:<ms>` jobs,
-- written by its add_job_scheduler / update_job_scheduler_next_millis (the caller
-- computes cron times; the layout computes `every` times itself).

-- name: upsert
-- $1 queue, $2 scheduler id, $3 next run (ms), $4 template data (JSON text), $5 template
-- options, $6 the spec (name, pattern | every, tz, startDate, endDate, limit, offset),
-- $7 the pending job's options -> (job_id, delay). Errors: -10 id collision, -11 slots
-- busy.
SELECT added.job_id, added.delay
  FROM add_job_scheduler($1::text, $2::text, $3::bigint, $4::jsonb, $5::jsonb, $6::jsonb,
                         $7::jsonb, (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                         NULL) AS added;

-- name: lock
-- $1 queue, $2 scheduler id: psyq's upserts of one scheduler run one after another (the
-- lock is held to the end of the transaction, taken before any of the layout's), so each
-- reads the scheduler as the one before left it.
SELECT pg_advisory_xact_lock(hashtext('psyq:scheduler:' || $1::text || ':' || $2::text));

-- name: next
-- $1 queue, $2 scheduler id, $3 next run (ms), $4 the pending job's options, $5 the job
-- that ran (the layout adds the next only while that one is the scheduler's current job)
-- -> the next job's id, or NULL.
SELECT update_job_scheduler_next_millis(
         $1::text, $2::text, $3::bigint, NULL, $4::jsonb,
         (extract(epoch FROM clock_timestamp()) * 1000)::bigint, $5::text);

-- name: one
-- $1 queue, $2 scheduler id -> the scheduler's row.
SELECT scheduler_id, name, iteration_count, limit_count, start_date_ms, end_date_ms, tz,
       pattern, every_ms, offset_ms, template_data::text AS template_data,
       template_opts::text AS template_opts, next_run_ms
  FROM scheduler WHERE queue = $1 AND scheduler_id = $2;

-- name: all
-- $1 queue -> every scheduler row, by next run then id.
SELECT scheduler_id, name, iteration_count, limit_count, start_date_ms, end_date_ms, tz,
       pattern, every_ms, offset_ms, template_data::text AS template_data,
       template_opts::text AS template_opts, next_run_ms
  FROM scheduler WHERE queue = $1 ORDER BY next_run_ms, scheduler_id;

-- name: remove
-- $1 queue, $2 scheduler id -> 1 removed (with its pending job), 0 missing.
SELECT remove_job_scheduler($1::text, $2::text);

-- name: done
-- $1 queue, $2 scheduler id: the spec allows no more runs (limit or end date reached);
-- the row stays, with no next run.
UPDATE scheduler SET next_run_ms = NULL WHERE queue = $1 AND scheduler_id = $2;

-- name: drop_waiting
-- $1 queue, $2 job id: a removed scheduler's pending job that is already waiting (the
-- layout's remove_job_scheduler drops it only while delayed). Events: removed.
WITH dropped AS (
  DELETE FROM job WHERE queue = $1 AND id = $2 AND state = 'waiting' RETURNING id
)
SELECT publish_event($1::text, 'removed', jsonb_build_object('jobId', id, 'prev', 'waiting'))
  FROM dropped;
