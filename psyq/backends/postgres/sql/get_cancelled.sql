-- get_cancelled: which of these active jobs were cancelled, with the reasons.
-- Parameters: $1 qkey, $2 job ids. Effects: none.

-- $2 job ids
SELECT id, cancel_reason FROM jobs
WHERE qkey = $1 AND id = ANY($2::text[]) AND state = 'active' AND cancel_reason IS NOT NULL;
