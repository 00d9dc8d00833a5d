-- listeners: the keys a backend waits on ("j:<qkey>", "e:<qkey>"), so that transitions
-- NOTIFY only keys someone listens for (notify_heard, migration 0008).
-- Effects: rows of the listeners table. Events: none. Returns: nothing.

-- name: lock
-- $1 keys, $2 channel. Before an announcement, in its transaction: waits until every
-- transaction that decided whether to notify one of the keys (notify_heard, holding the
-- key's lock to its end) has ended (migration 0012).
SELECT pg_advisory_xact_lock(1886615921, hashtext($2::text || k)) FROM unnest($1::text[]) AS k;

-- name: announce
-- $1 keys, $2 listener id (one per open backend), $3 time to live ms. Also drops other
-- listeners' expired entries (a backend that died without forgetting its keys).
WITH expired AS (
    DELETE FROM listeners WHERE expires <= now_ms() AND listener <> $2
)
INSERT INTO listeners (key, listener, expires)
SELECT k, $2, now_ms() + $3 FROM unnest($1::text[]) AS k
ON CONFLICT (key, listener) DO UPDATE SET expires = EXCLUDED.expires;

-- name: forget
-- $1 listener id: a backend that closes drops its entries.
DELETE FROM listeners WHERE listener = $1;
