-- extend_locks: renew the leases {id: token} of active jobs to now_ms() + duration.
-- Parameters: $1 qkey, $2 ids, $3 tokens, $4 duration ms. Effects: lock_expires moves on.
-- Events: none. Returns: the ids whose lease was renewed; `released` names those their
-- holder let go meanwhile (finished, retried, ...), which are not lost.

-- name: renew
UPDATE jobs SET lock_expires = now_ms() + $4
FROM unnest($2::text[], $3::text[]) AS l(id, token)
WHERE jobs.qkey = $1 AND jobs.id = l.id AND jobs.state = 'active' AND jobs.lock_token = l.token
RETURNING jobs.id;

-- name: released
SELECT j.id FROM jobs j JOIN unnest($2::text[], $3::text[]) AS l(id, token) ON j.id = l.id
WHERE j.qkey = $1 AND j.state <> 'active' AND j.lock_token = l.token;
