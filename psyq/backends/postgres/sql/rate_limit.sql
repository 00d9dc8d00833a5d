-- rate_limit: hold the whole queue until now + delay (never shortens a hold).
-- Parameters: $1 qkey, $2 queue name, $3 delay ms. Effects: queues.limited_until.
-- Events: none.

-- $2 queue name, $3 delay ms
INSERT INTO queues (qkey, name, limited_until) VALUES ($1, $2, now_ms() + $3)
ON CONFLICT (qkey) DO UPDATE
SET limited_until = greatest(queues.limited_until, EXCLUDED.limited_until);
