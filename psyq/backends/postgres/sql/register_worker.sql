-- register_worker: a worker says it runs (queue.get_workers); its backend renews the entry
-- (heartbeat) until it unregisters, so the entry of a worker that died expires.
-- Parameters: per statement. Effects: the workers table only. Events: none.

-- name: register
-- $1 qkey, $2 worker name, $3 info (JSON), $4 TTL ms. Also forgets the queue's expired
-- entries, so workers that died leave no rows behind.
WITH forgotten AS (
    DELETE FROM workers WHERE qkey = $1 AND expires <= now_ms()
)
INSERT INTO workers (qkey, name, info, started, expires)
VALUES ($1, $2, $3::text::jsonb, now_ms(), now_ms() + $4)
ON CONFLICT (qkey, name) DO UPDATE
SET info = EXCLUDED.info, started = EXCLUDED.started, expires = EXCLUDED.expires;

-- name: heartbeat
-- $1 qkeys, $2 worker names, $3 infos (JSON), $4 TTL ms: one element per worker this
-- backend runs. An entry that expired meanwhile (a long outage) is written again.
INSERT INTO workers (qkey, name, info, started, expires)
SELECT w.qkey, w.name, w.info::jsonb, now_ms(), now_ms() + $4
FROM unnest($1::text[], $2::text[], $3::text[]) AS w(qkey, name, info)
ON CONFLICT (qkey, name) DO UPDATE SET expires = EXCLUDED.expires;
