-- upsert_job_scheduler / get_job_scheduler(s) / remove_job_scheduler, and the next run
-- created when a scheduler's job becomes active (move_to_active).
-- Parameters: $1 qkey, $2 scheduler id, others per statement. Effects: one row per
-- scheduler; its pending job is added through add_jobs. Events: those of add_jobs.

-- name: lock
SELECT * FROM schedulers WHERE qkey = $1 AND id = $2 FOR UPDATE;

-- name: upsert
-- $3 spec, $4 template name, $5 template data, $6 template opts
INSERT INTO schedulers (qkey, id, spec, template_name, template_data, template_opts,
                        iteration_count, next_ms, pending)
VALUES ($1, $2, $3::text::jsonb, $4, $5, $6::text::jsonb, 0, NULL, NULL)
ON CONFLICT (qkey, id) DO UPDATE
SET spec = EXCLUDED.spec, template_name = EXCLUDED.template_name,
    template_data = EXCLUDED.template_data, template_opts = EXCLUDED.template_opts,
    iteration_count = 0, next_ms = NULL, pending = NULL;

-- name: set_run
-- $3 iterations so far, $4 next run ms, $5 pending job id
UPDATE schedulers SET iteration_count = $3, next_ms = $4, pending = $5
WHERE qkey = $1 AND id = $2;

-- name: get
SELECT * FROM schedulers WHERE qkey = $1 AND id = $2;

-- name: all
SELECT * FROM schedulers WHERE qkey = $1 ORDER BY COALESCE(next_ms, 0), id;

-- name: delete
DELETE FROM schedulers WHERE qkey = $1 AND id = $2 RETURNING *;
