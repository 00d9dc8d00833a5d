-- drain: remove waiting and prioritized jobs (and delayed ones when asked), through
-- common.drop_jobs. Parameters: $1 qkey, $2 also delayed. Events: none. Returns: the ids.

-- $2 also delayed jobs
SELECT id FROM jobs
WHERE qkey = $1 AND (state IN ('waiting', 'prioritized') OR ($2::boolean AND state = 'delayed'));
