-- set_global_concurrency: at most n active jobs across every worker (NULL: none).
-- Parameters: $1 qkey, $2 queue name, $3 concurrency. Events: none.

-- $2 queue name, $3 concurrency (NULL: none)
INSERT INTO queues (qkey, name, global_concurrency) VALUES ($1, $2, $3)
ON CONFLICT (qkey) DO UPDATE SET global_concurrency = EXCLUDED.global_concurrency;
