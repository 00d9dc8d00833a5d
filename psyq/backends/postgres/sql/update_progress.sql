-- update_progress: store a job's progress (JSON).
-- Parameters: $1 qkey, $2 job id, $3 progress (JSON). Effects: jobs.progress.
-- Events: progress (written by the caller). Return codes: no row = JOB_MISSING.

-- $3 progress (JSON)
UPDATE jobs SET progress = $3::text::jsonb WHERE qkey = $1 AND id = $2 RETURNING id;
