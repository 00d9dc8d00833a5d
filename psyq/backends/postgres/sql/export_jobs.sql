-- export_jobs / import_jobs / get_queue_meta / set_queue_meta: what `psyq migrate` moves.
-- Parameters: $1 qkey, others per statement. Effects: export reads pages in line order
-- (waiting as taken, prioritized by priority, delayed by due time, active,
-- waiting-children, completed, failed: each by sequence after its key), resuming after the
-- (key, seq, id) of the cursor. Import writes jobs by id in one transaction (the caller
-- refuses a different job under a taken id before writing), replaces their logs and their
-- children's links, and raises the auto-id counter past imported ids.
-- Events: none (import wakes workers with a NOTIFY only). Return codes: none.

-- name: page_by_seq
-- $2 state, $3 seq, $4 id: rows of one state after (seq, id), $5 page size.
SELECT * FROM jobs
WHERE qkey = $1 AND state = $2 AND (seq, id) > ($3::bigint, $4::text)
ORDER BY seq, id
LIMIT $5;

-- name: page_prioritized
-- $2 priority, $3 seq, $4 id: prioritized rows after (priority, seq, id), $5 page size.
SELECT * FROM jobs
WHERE qkey = $1 AND state = 'prioritized'
  AND (priority::bigint, seq, id) > ($2::bigint, $3::bigint, $4::text)
ORDER BY priority, seq, id
LIMIT $5;

-- name: page_delayed
-- $2 due, $3 seq, $4 id: delayed rows after (due, seq, id), $5 page size.
SELECT * FROM jobs
WHERE qkey = $1 AND state = 'delayed' AND (due, seq, id) > ($2::bigint, $3::bigint, $4::text)
ORDER BY due, seq, id
LIMIT $5;

-- name: logs
-- $2 job ids (a join, not `job_id = ANY($2)`: see `existing_drop_new`)
SELECT l.job_id, l.row FROM logs l JOIN unnest($2::text[]) AS w(id) ON l.job_id = w.id
WHERE l.qkey = $1
ORDER BY l.job_id, l.seq;

-- name: links
-- $2 parent ids: their children's links (a join: see `existing_drop_new`).
SELECT d.parent_id, d.child_key, d.status, d.value
FROM deps d JOIN unnest($2::text[]) AS w(id) ON d.parent_id = w.id
WHERE d.parent_qkey = $1
ORDER BY d.parent_id, d.child_key;

-- name: import_begin
-- $2 queue name, $3 the largest numeric id of the page (0: none). An import's first
-- statement: the queue row, its auto-id counter raised past the page's numeric ids, and
-- synchronous_commit off for this transaction only (its commit does not wait for the WAL
-- flush; the migration's last step, the queue metadata, commits synchronously and so
-- flushes every import before it: see docs/migrate.md, "Durability"). Sequential scans go
-- off for the transaction too: every lookup of an import is by an index prefix, and a plan
-- made while a table was small must not scan it whole once it has grown. Returns whether the
-- queue has any log or link row (then a new job's id is checked for stale ones first).
WITH queue AS (
  INSERT INTO queues (qkey, name, last_id) VALUES ($1, $2, $3)
  ON CONFLICT (qkey) DO UPDATE SET last_id = EXCLUDED.last_id
  WHERE queues.last_id < EXCLUDED.last_id
)
SELECT EXISTS (SELECT FROM logs WHERE qkey = $1) OR EXISTS (SELECT FROM deps WHERE parent_qkey = $1),
       set_config('synchronous_commit', 'off', true), set_config('enable_seqscan', 'off', true);

-- name: existing_drop_new
-- $2 ids. Returns the rows already under those ids, locked for the import; drops the other
-- ids' (the jobs this import writes) logs and children's links. One statement for what
-- took four (the new jobs' sequence numbers come from the COPY: the column's default).
-- Every lookup probes a primary key id by id (a lateral subquery; OFFSET 0 keeps the planner
-- from turning it into a join): a join could take a plan made while the table was small,
-- scanning all the queue's rows or logs for every page (its cost growing with the queue).
-- The drops delete the rows those probes found, by their row address (ctid); a queue without
-- any log (or link) row is not probed id by id at all (one index lookup instead: the usual
-- case of a migration, where a queue's completed jobs and their logs come last).
WITH page AS (SELECT id FROM unnest($2::text[]) AS w(id)),
taken AS (
  SELECT j.id, j.name, j.data, j.timestamp
  FROM page
  CROSS JOIN LATERAL (
    SELECT id, name, data, timestamp FROM jobs WHERE qkey = $1 AND id = page.id FOR UPDATE
  ) AS j
),
fresh AS (
  SELECT page.id FROM page LEFT JOIN taken ON taken.id = page.id
  WHERE taken.id IS NULL
),
dropped_logs AS (
  DELETE FROM logs WHERE ctid = ANY (ARRAY(
    SELECT l.ctid FROM fresh
    CROSS JOIN LATERAL (SELECT ctid FROM logs WHERE qkey = $1 AND job_id = fresh.id OFFSET 0) l
    WHERE EXISTS (SELECT FROM logs WHERE qkey = $1)
  ))
),
dropped_links AS (
  DELETE FROM deps WHERE ctid = ANY (ARRAY(
    SELECT d.ctid FROM fresh
    CROSS JOIN LATERAL (
      SELECT ctid FROM deps WHERE parent_qkey = $1 AND parent_id = fresh.id OFFSET 0
    ) d
    WHERE EXISTS (SELECT FROM deps WHERE parent_qkey = $1)
  ))
)
SELECT id, name, data, timestamp FROM taken;

-- name: dedup_keys
-- Live keys only.
SELECT dedup_id, job_id, expires FROM dedup
WHERE qkey = $1 AND (expires IS NULL OR expires > now_ms())
ORDER BY dedup_id;

-- name: set_meta
-- $2 queue name, $3 paused, $4 last id, $5 max events, $6 global concurrency,
-- $7 global max, $8 global duration, $9 limited until
INSERT INTO queues (qkey, name, paused, last_id, max_len_events, global_concurrency,
                    global_max, global_duration, limited_until)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (qkey) DO UPDATE
SET paused = EXCLUDED.paused, last_id = greatest(queues.last_id, EXCLUDED.last_id),
    max_len_events = EXCLUDED.max_len_events,
    global_concurrency = EXCLUDED.global_concurrency, global_max = EXCLUDED.global_max,
    global_duration = EXCLUDED.global_duration,
    limited_until = greatest(queues.limited_until, EXCLUDED.limited_until);

-- name: scheduler_row
-- $2 id, $3 spec, $4 template name, $5 template data, $6 template opts, $7 iterations,
-- $8 next run, $9 pending job id
INSERT INTO schedulers (qkey, id, spec, template_name, template_data, template_opts,
                        iteration_count, next_ms, pending)
VALUES ($1, $2, $3::text::jsonb, $4, $5, $6::text::jsonb, $7, $8, $9)
ON CONFLICT (qkey, id) DO UPDATE
SET spec = EXCLUDED.spec, template_name = EXCLUDED.template_name,
    template_data = EXCLUDED.template_data, template_opts = EXCLUDED.template_opts,
    iteration_count = EXCLUDED.iteration_count, next_ms = EXCLUDED.next_ms,
    pending = EXCLUDED.pending;

-- name: upsert_many
-- $2.. one array per column of the jobs written (state, due and seq computed by the caller),
-- in `upsert`'s order: every job of an import page in one statement.
INSERT INTO jobs (qkey, id, name, data, opts, timestamp, delay, priority, progress,
                  attempts_made, attempts_started, stalled_counter, processed_on, finished_on,
                  returnvalue, failed_reason, stacktrace, parent_key, processed_by, state, seq,
                  due)
SELECT $1, id, name, data, opts::jsonb, ts, delay, priority, progress::jsonb, atm, ats, stc,
       processed_on, finished_on, returnvalue, failed_reason, stacktrace::jsonb, parent_key,
       processed_by, state, seq, due
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[],
            $8::integer[], $9::text[], $10::integer[], $11::integer[], $12::integer[],
            $13::bigint[], $14::bigint[], $15::text[], $16::text[], $17::text[], $18::text[],
            $19::text[], $20::text[], $21::bigint[], $22::bigint[])
     AS j(id, name, data, opts, ts, delay, priority, progress, atm, ats, stc, processed_on,
          finished_on, returnvalue, failed_reason, stacktrace, parent_key, processed_by, state,
          due, seq)
ON CONFLICT (qkey, id) DO UPDATE
SET name = EXCLUDED.name, data = EXCLUDED.data, opts = EXCLUDED.opts,
    timestamp = EXCLUDED.timestamp, delay = EXCLUDED.delay, priority = EXCLUDED.priority,
    progress = EXCLUDED.progress, attempts_made = EXCLUDED.attempts_made,
    attempts_started = EXCLUDED.attempts_started, stalled_counter = EXCLUDED.stalled_counter,
    processed_on = EXCLUDED.processed_on, finished_on = EXCLUDED.finished_on,
    returnvalue = EXCLUDED.returnvalue, failed_reason = EXCLUDED.failed_reason,
    stacktrace = EXCLUDED.stacktrace, parent_key = EXCLUDED.parent_key,
    processed_by = EXCLUDED.processed_by, state = EXCLUDED.state, seq = EXCLUDED.seq,
    due = EXCLUDED.due, lock_token = NULL, lock_expires = NULL, cancel_reason = NULL;

-- name: drop_logs_many
-- $2 job ids: their logs go (an import replaces them). A join, as in `existing_drop_new`.
DELETE FROM logs l USING unnest($2::text[]) AS w(id) WHERE l.qkey = $1 AND l.job_id = w.id;

-- name: add_logs_many
-- $2 job ids, $3 rows (one entry per row, each job's rows in order)
INSERT INTO logs (qkey, job_id, row)
SELECT $1, j, r FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS l(j, r, n)
ORDER BY n;

-- name: drop_links_many
-- $2 parent ids: their children's links go (an import replaces them). A join, as in
-- `existing_drop_new`.
DELETE FROM deps d USING unnest($2::text[]) AS w(id)
WHERE d.parent_qkey = $1 AND d.parent_id = w.id;

-- name: add_links_many
-- $2 parent ids, $3 child keys, $4 statuses, $5 values (one entry per link)
INSERT INTO deps (parent_qkey, parent_id, child_key, status, value)
SELECT $1, p, k, s, v FROM unnest($2::text[], $3::text[], $4::text[], $5::text[])
     AS l(p, k, s, v);
