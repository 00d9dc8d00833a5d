-- set_global_rate_limit: at most max jobs per duration across every worker (NULL: none);
-- the fetch enforces it under the queue row's lock.
-- Parameters: $1 qkey, $2 queue name, $3 max, $4 duration ms. Events: none.

-- $2 queue name, $3 max (NULL: none), $4 duration
INSERT INTO queues (qkey, name, global_max, global_duration) VALUES ($1, $2, $3, $4)
ON CONFLICT (qkey) DO UPDATE
SET global_max = EXCLUDED.global_max, global_duration = EXCLUDED.global_duration;
