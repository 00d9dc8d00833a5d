-- remove_deduplication_key: drop a dedup key (only if held by $3 when given).
-- Parameters: $1 qkey, $2 dedup id, $3 job id or NULL. Returns: a row when removed.

-- $2 dedup id, $3 job id (NULL: any)
DELETE FROM dedup WHERE qkey = $1 AND dedup_id = $2 AND ($3::text IS NULL OR job_id = $3)
RETURNING job_id;
