-- get_deduplication_job_id: the job holding a dedup key, while the key lives.
-- Parameters: $1 qkey, $2 dedup id. Effects: none.

-- $2 dedup id
SELECT job_id FROM dedup
WHERE qkey = $1 AND dedup_id = $2 AND (expires IS NULL OR expires > now_ms());
