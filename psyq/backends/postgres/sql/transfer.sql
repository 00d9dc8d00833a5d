-- Export and import (psyq migrate, the Spark pipeline): pages of a queue's jobs in line
-- order, and writing such pages idempotently by id, in their states, without events.
-- Line order: waiting (as they will be taken), prioritized, delayed (by due time),
-- active, waiting-children, completed and failed (by finish time); a page's cursor is the
-- last job's (rank, key, seq, id).

-- name: page
-- $1 queue, $2 rank, $3 key, $4 seq, $5 id (after this job), $6 most jobs -> job rows with
-- their line position (line_rank, line_key).
-- One branch per rank (and, where the key column may be NULL, per NULL-ness: such a job's
-- key is 0), each reading its state's partial index from the cursor on, so a page costs
-- the same at the end of a million jobs as at the start. A branch before the cursor's
-- rank reads nothing; one after it reads from its start (the bounds' CASE).
SELECT * FROM (
  (SELECT job.*, 0 AS line_rank, 0::bigint AS line_key FROM job
    WHERE queue = $1 AND state = 'waiting' AND priority = 0 AND $2::integer <= 0
      AND (seq, id) > (CASE WHEN $2 = 0 THEN $4::bigint ELSE -9223372036854775808 END,
                       CASE WHEN $2 = 0 THEN $5::text ELSE '' END)
    ORDER BY job.seq, job.id LIMIT $6)
  UNION ALL
  (SELECT job.*, 1, priority::bigint FROM job
    WHERE queue = $1 AND state = 'waiting' AND priority > 0 AND $2 <= 1
      AND (priority, seq, id) > (CASE WHEN $2 = 1 THEN $3::bigint::integer ELSE 1 END,
                                 CASE WHEN $2 = 1 THEN $4 ELSE -9223372036854775808 END,
                                 CASE WHEN $2 = 1 THEN $5 ELSE '' END)
    ORDER BY job.priority, job.seq, job.id LIMIT $6)
  UNION ALL
  (SELECT job.*, 2, process_at_ms FROM job
    WHERE queue = $1 AND state = 'delayed' AND $2 <= 2 AND process_at_ms IS NOT NULL
      AND (process_at_ms, seq, id) > (CASE WHEN $2 = 2 THEN $3 ELSE -9223372036854775808 END,
                                      CASE WHEN $2 = 2 THEN $4 ELSE -9223372036854775808 END,
                                      CASE WHEN $2 = 2 THEN $5 ELSE '' END)
    ORDER BY job.process_at_ms, job.seq, job.id LIMIT $6)
  UNION ALL
  (SELECT job.*, 2, 0 FROM job
    WHERE queue = $1 AND state = 'delayed' AND $2 <= 2 AND process_at_ms IS NULL
      AND (0, seq, id) > (CASE WHEN $2 = 2 THEN $3 ELSE -9223372036854775808 END,
                          CASE WHEN $2 = 2 THEN $4 ELSE -9223372036854775808 END,
                          CASE WHEN $2 = 2 THEN $5 ELSE '' END)
    ORDER BY job.seq, job.id LIMIT $6)
  UNION ALL
  (SELECT job.*, 3, 0 FROM job
    WHERE queue = $1 AND state = 'active' AND $2 <= 3
      AND (seq, id) > (CASE WHEN $2 = 3 THEN $4 ELSE -9223372036854775808 END,
                       CASE WHEN $2 = 3 THEN $5 ELSE '' END)
    ORDER BY job.seq, job.id LIMIT $6)
  UNION ALL
  (SELECT job.*, 4, 0 FROM job
    WHERE queue = $1 AND state = 'waiting-children' AND $2 <= 4
      AND (seq, id) > (CASE WHEN $2 = 4 THEN $4 ELSE -9223372036854775808 END,
                       CASE WHEN $2 = 4 THEN $5 ELSE '' END)
    ORDER BY job.seq, job.id LIMIT $6)
  UNION ALL
  (SELECT job.*, 5, finished_at_ms FROM job
    WHERE queue = $1 AND state = 'completed' AND $2 <= 5 AND finished_at_ms IS NOT NULL
      AND (finished_at_ms, seq, id) > (CASE WHEN $2 = 5 THEN $3 ELSE -9223372036854775808 END,
                                       CASE WHEN $2 = 5 THEN $4 ELSE -9223372036854775808 END,
                                       CASE WHEN $2 = 5 THEN $5 ELSE '' END)
    ORDER BY job.finished_at_ms, job.seq, job.id LIMIT $6)
  UNION ALL
  (SELECT job.*, 5, 0 FROM job
    WHERE queue = $1 AND state = 'completed' AND $2 <= 5 AND finished_at_ms IS NULL
      AND (0, seq, id) > (CASE WHEN $2 = 5 THEN $3 ELSE -9223372036854775808 END,
                          CASE WHEN $2 = 5 THEN $4 ELSE -9223372036854775808 END,
                          CASE WHEN $2 = 5 THEN $5 ELSE '' END)
    ORDER BY job.seq, job.id LIMIT $6)
  UNION ALL
  (SELECT job.*, 6, finished_at_ms FROM job
    WHERE queue = $1 AND state = 'failed' AND $2 <= 6 AND finished_at_ms IS NOT NULL
      AND (finished_at_ms, seq, id) > (CASE WHEN $2 = 6 THEN $3 ELSE -9223372036854775808 END,
                                       CASE WHEN $2 = 6 THEN $4 ELSE -9223372036854775808 END,
                                       CASE WHEN $2 = 6 THEN $5 ELSE '' END)
    ORDER BY job.finished_at_ms, job.seq, job.id LIMIT $6)
  UNION ALL
  (SELECT job.*, 6, 0 FROM job
    WHERE queue = $1 AND state = 'failed' AND $2 <= 6 AND finished_at_ms IS NULL
      AND (0, seq, id) > (CASE WHEN $2 = 6 THEN $3 ELSE -9223372036854775808 END,
                          CASE WHEN $2 = 6 THEN $4 ELSE -9223372036854775808 END,
                          CASE WHEN $2 = 6 THEN $5 ELSE '' END)
    ORDER BY job.seq, job.id LIMIT $6)
) lined
 ORDER BY line_rank, line_key, seq, id
 LIMIT $6;

-- name: logs
-- $1 queue, $2 job ids -> (job_id, row) in log order.
SELECT job_id, row FROM job_log WHERE queue = $1 AND job_id = ANY($2::text[])
 ORDER BY job_id, idx;

-- name: deps
-- $1 queue, $2 parent ids -> the parents' dependency rows.
SELECT parent_id, child_key, status::text AS status, value::text AS value
  FROM job_dependency WHERE parent_queue = $1 AND parent_id = ANY($2::text[])
 ORDER BY parent_id, child_key;

-- name: existing
-- $1 queue, $2 ids -> (id, name, data, added_at_ms) of those already there.
SELECT id, name, data::text AS data, added_at_ms FROM job
 WHERE queue = $1 AND id = ANY($2::text[]);

-- name: write
-- $1 queue, $2 jobs (a JSON array of rows, `n` their line order), $3 overwrite -> ids
-- written.
-- Each job gets a new place in the global sequence, in the page's order.
WITH given AS (
  SELECT *
    FROM jsonb_to_recordset($2::jsonb) AS rows(n integer, 
           id text, name text, state text, data text, opts jsonb, priority integer,
           delay_ms bigint, max_attempts integer, attempts_made integer,
           attempts_started integer, progress jsonb, return_value text,
           failed_reason text, stacktrace jsonb, processed_by text, added_at_ms bigint,
           process_at_ms bigint, processed_at_ms bigint, finished_at_ms bigint,
           stalled_count integer, parent_queue text, parent_id text, parent_key text,
           pending_deps integer, scheduler_id text, dedup_id text)
)
INSERT INTO job (queue, id, seq, name, state, data, opts, priority, delay_ms, max_attempts,
                 attempts_made, attempts_started, progress, return_value, failed_reason,
                 stacktrace, processed_by, added_at_ms, process_at_ms, processed_at_ms,
                 finished_at_ms, stalled_count, parent_queue, parent_id, parent_key,
                 pending_deps, scheduler_id, dedup_id)
SELECT $1, id, nextval('job_seq'), name, state::job_state, data::jsonb, opts, priority,
       delay_ms, max_attempts, attempts_made, attempts_started, progress,
       return_value::jsonb, failed_reason, stacktrace, processed_by, added_at_ms,
       process_at_ms, processed_at_ms, finished_at_ms, stalled_count, parent_queue,
       parent_id, parent_key, pending_deps, scheduler_id, dedup_id
  FROM given ORDER BY n
ON CONFLICT (queue, id) DO UPDATE
   SET seq = EXCLUDED.seq, name = EXCLUDED.name, state = EXCLUDED.state,
       data = EXCLUDED.data, opts = EXCLUDED.opts, priority = EXCLUDED.priority,
       delay_ms = EXCLUDED.delay_ms, max_attempts = EXCLUDED.max_attempts,
       attempts_made = EXCLUDED.attempts_made,
       attempts_started = EXCLUDED.attempts_started, progress = EXCLUDED.progress,
       return_value = EXCLUDED.return_value, failed_reason = EXCLUDED.failed_reason,
       stacktrace = EXCLUDED.stacktrace, processed_by = EXCLUDED.processed_by,
       added_at_ms = EXCLUDED.added_at_ms, process_at_ms = EXCLUDED.process_at_ms,
       processed_at_ms = EXCLUDED.processed_at_ms,
       finished_at_ms = EXCLUDED.finished_at_ms, stalled_count = EXCLUDED.stalled_count,
       parent_queue = EXCLUDED.parent_queue, parent_id = EXCLUDED.parent_id,
       parent_key = EXCLUDED.parent_key, pending_deps = EXCLUDED.pending_deps,
       scheduler_id = EXCLUDED.scheduler_id, dedup_id = EXCLUDED.dedup_id,
       lock_token = NULL, locked_until_ms = NULL
 WHERE $3::boolean
RETURNING id;

-- name: write_logs
-- $1 queue, $2 job ids, $3 rows (one element per row; a job's rows in order).
INSERT INTO job_log (queue, job_id, idx, row)
SELECT $1, job_id, row_number() OVER (PARTITION BY job_id ORDER BY n) - 1, row
  FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS given(job_id, row, n)
ON CONFLICT (queue, job_id, idx) DO UPDATE SET row = EXCLUDED.row;

-- name: write_deps
-- $1 parent queue, $2 parent ids, $3 child keys (`<queue>:<id>`), $4 statuses, $5 values
-- (JSON text or NULL).
INSERT INTO job_dependency (parent_queue, parent_id, child_queue, child_id, child_key,
                            status, value)
SELECT $1, parent_id, split_part(child_key, ':', 1),
       substr(child_key, length(split_part(child_key, ':', 1)) + 2), child_key,
       status::dep_status, value::jsonb
  FROM unnest($2::text[], $3::text[], $4::text[], $5::text[])
       AS given(parent_id, child_key, status, value)
ON CONFLICT (parent_queue, parent_id, child_key) DO UPDATE
   SET status = EXCLUDED.status, value = EXCLUDED.value;

-- name: counter_at_least
-- $1 queue, $2 highest numeric id moved: the queue's id counter (the layout's sequence)
-- never hands out one of them again. A missing sequence is made by the layout's
-- next_job_id (which hands out 1, so the counter then stands at max(1, $2)).
WITH made AS (
  SELECT CASE WHEN to_regclass(job_id_seq_name($1::text)) IS NULL
              THEN next_job_id($1::text) END AS first
)
SELECT setval(job_id_seq_name($1::text)::regclass, $2::bigint)
  FROM made
 WHERE $2::bigint > COALESCE(pg_sequence_last_value(job_id_seq_name($1::text)::regclass), 0);

-- name: meta
-- $1 queue -> the queue's meta rows.
SELECT field, value FROM meta WHERE queue = $1;

-- name: dedup
-- $1 queue -> its deduplication keys.
SELECT dedup_id, job_id, expire_at_ms FROM dedup WHERE queue = $1;

-- name: write_dedup
-- $1 queue, $2 dedup ids, $3 job ids, $4 expiries (NULL: none).
INSERT INTO dedup (queue, dedup_id, job_id, expire_at_ms)
SELECT $1, dedup_id, job_id, expire_at_ms
  FROM unnest($2::text[], $3::text[], $4::bigint[]) AS given(dedup_id, job_id, expire_at_ms)
ON CONFLICT (queue, dedup_id) DO UPDATE
   SET job_id = EXCLUDED.job_id, expire_at_ms = EXCLUDED.expire_at_ms;

-- name: write_scheduler
-- $1 queue, $2 scheduler row (JSON object with the scheduler table's columns).
INSERT INTO scheduler (queue, scheduler_id, name, next_run_ms, pattern, every_ms, tz,
                       start_date_ms, end_date_ms, limit_count, iteration_count,
                       template_data, template_opts, offset_ms)
SELECT $1, s.scheduler_id, s.name, s.next_run_ms, s.pattern, s.every_ms, s.tz,
       s.start_date_ms, s.end_date_ms, s.limit_count, COALESCE(s.iteration_count, 0),
       s.template_data, s.template_opts, s.offset_ms
  FROM jsonb_to_record($2::jsonb) AS s(
         scheduler_id text, name text, next_run_ms bigint, pattern text, every_ms bigint,
         tz text, start_date_ms bigint, end_date_ms bigint, limit_count integer,
         iteration_count integer, template_data jsonb, template_opts jsonb, offset_ms bigint)
ON CONFLICT (queue, scheduler_id) DO UPDATE
   SET name = EXCLUDED.name, next_run_ms = EXCLUDED.next_run_ms,
       pattern = EXCLUDED.pattern, every_ms = EXCLUDED.every_ms, tz = EXCLUDED.tz,
       start_date_ms = EXCLUDED.start_date_ms, end_date_ms = EXCLUDED.end_date_ms,
       limit_count = EXCLUDED.limit_count, iteration_count = EXCLUDED.iteration_count,
       template_data = EXCLUDED.template_data, template_opts = EXCLUDED.template_opts,
       offset_ms = EXCLUDED.offset_ms;

-- name: schedulers
-- $1 queue -> its scheduler rows as JSON objects.
SELECT to_jsonb(scheduler) - 'queue' AS row FROM scheduler WHERE queue = $1
 ORDER BY scheduler_id;

-- name: async_commit
-- In an import's transaction: its commit does not wait for the WAL flush, and every lookup
-- goes by an index (docs/migrate.md, "Durability"); both for this transaction only.
SELECT set_config('synchronous_commit', 'off', true), set_config('enable_seqscan', 'off', true);

-- name: wait_committed
-- -> the message's WAL position. A transactional logical message is a WAL record of this
-- statement's transaction (taking a transaction id alone writes none, and a transaction
-- that wrote no WAL commits without waiting), so with synchronous_commit on (set here, for
-- it alone) its commit returns only once the WAL up to it is on disk: so are the
-- asynchronous commits of every import before it. Any role may emit one; a logical
-- decoding reader sees it under the prefix 'psyq'.
SELECT set_config('synchronous_commit', 'on', true),
       pg_logical_emit_message(true, 'psyq', 'wait_committed');

-- name: last_id
-- $1 queue -> the last automatic id its sequence handed out (0 when it has none yet).
SELECT COALESCE(pg_sequence_last_value(to_regclass(job_id_seq_name($1::text))), 0)::bigint;
