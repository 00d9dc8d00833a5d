-- register_worker: a worker says it runs (queue.get_workers).
-- Parameters: $1 qkey, $2 worker name, $3 info (JSON). Events: none.

-- $2 worker name, $3 info (JSON)
INSERT INTO workers (qkey, name, info, started) VALUES ($1, $2, $3::text::jsonb, now_ms())
ON CONFLICT (qkey, name) DO UPDATE SET info = EXCLUDED.info, started = EXCLUDED.started;
