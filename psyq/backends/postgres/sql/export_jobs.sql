-- export_jobs / import_jobs / get_queue_meta / set_queue_meta: what `psyq migrate` moves.
-- Parameters: $1 qkey, others per statement. Effects: import writes jobs idempotently by
-- id (an existing id is kept unless overwrite), replaces their logs, rebuilds flow links
-- from the children's parent option and raises the auto-id counter past imported ids.
-- Events: waiting (jobs imported ready). Return codes: none.

-- name: page
-- $2 after this id ('' = from the start), $3 page size. Pages follow the primary key.
SELECT * FROM jobs WHERE qkey = $1 AND id > $2 ORDER BY id LIMIT $3;

-- name: logs
-- $2 job ids
SELECT job_id, row FROM logs WHERE qkey = $1 AND job_id = ANY($2::text[]) ORDER BY job_id, seq;

-- name: existing_ids
-- $2 ids
SELECT id FROM jobs WHERE qkey = $1 AND id = ANY($2::text[]);

-- name: upsert
-- $2.. every column of one job (state, seq and due computed by the caller)
INSERT INTO jobs (qkey, id, name, data, opts, timestamp, delay, priority, progress,
                  attempts_made, attempts_started, stalled_counter, processed_on, finished_on,
                  returnvalue, failed_reason, stacktrace, parent_key, processed_by, state, seq,
                  due)
VALUES ($1, $2, $3, $4, $5::text::jsonb, $6, $7, $8, $9::text::jsonb, $10, $11, $12, $13, $14,
        $15, $16, $17::text::jsonb, $18, $19, $20, $21, $22)
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

-- name: replace_logs
-- $2 job id, $3 rows
WITH gone AS (
    DELETE FROM logs WHERE qkey = $1 AND job_id = $2
)
INSERT INTO logs (qkey, job_id, row) SELECT $1, $2, r FROM unnest($3::text[]) WITH ORDINALITY AS l(r, n)
ORDER BY n;

-- name: raise_last_id
-- $2 queue name, $3 the largest numeric id imported
INSERT INTO queues (qkey, name, last_id) VALUES ($1, $2, $3)
ON CONFLICT (qkey) DO UPDATE SET last_id = greatest(queues.last_id, EXCLUDED.last_id);

-- name: link
-- $1 parent qkey, $2 parent id, $3 child key, $4 status, $5 value
INSERT INTO deps (parent_qkey, parent_id, child_key, status, value) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (parent_qkey, parent_id, child_key) DO UPDATE
SET status = EXCLUDED.status, value = EXCLUDED.value;

-- name: dedup_keys
SELECT dedup_id, job_id, expires FROM dedup WHERE qkey = $1 ORDER BY dedup_id;

-- name: set_meta
-- $2 queue name, $3 paused, $4 last id, $5 max events, $6 global concurrency,
-- $7 global max, $8 global duration
INSERT INTO queues (qkey, name, paused, last_id, max_len_events, global_concurrency,
                    global_max, global_duration)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (qkey) DO UPDATE
SET paused = EXCLUDED.paused, last_id = greatest(queues.last_id, EXCLUDED.last_id),
    max_len_events = EXCLUDED.max_len_events,
    global_concurrency = EXCLUDED.global_concurrency, global_max = EXCLUDED.global_max,
    global_duration = EXCLUDED.global_duration;

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
