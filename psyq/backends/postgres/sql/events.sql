-- The events stream (QueueEvents): the layout's `event` table, numbered by one sequence.

-- name: read
-- $1 queue, $2 after this id, $3 most events -> (id, event, data), oldest first.
SELECT id, event, data FROM event WHERE queue = $1 AND id > $2 ORDER BY id LIMIT $3;

-- name: read_upto
-- $1 queue, $2 after this id, $3 up to this id -> (id, event, data), oldest first.
SELECT id, event, data FROM event WHERE queue = $1 AND id > $2 AND id <= $3 ORDER BY id;

-- name: writers
-- -> the transactions now holding a write lock on `event` (their virtual ids): any of
-- them may commit an event numbered below one a reader has already seen.
SELECT COALESCE(array_agg(virtualtransaction), '{}') FROM pg_locks
 WHERE locktype = 'relation' AND relation = 'event'::regclass
   AND mode = 'RowExclusiveLock' AND granted AND pid <> pg_backend_pid();

-- name: writing
-- $1 virtual transaction ids -> whether any of them is still running.
SELECT EXISTS (SELECT 1 FROM pg_locks WHERE virtualtransaction = ANY($1::text[]));

-- name: newest
-- $1 queue -> the newest event id (0 when none).
SELECT COALESCE(max(id), 0) FROM event WHERE queue = $1;

-- name: max_len
-- $1 queue, $2 most events kept (the layout trims in steps of 256 past it).
INSERT INTO meta (queue, field, value) VALUES ($1, 'opts.maxLenEvents', $2::text)
ON CONFLICT (queue, field) DO UPDATE SET value = EXCLUDED.value;

-- name: publish
-- $1 queue, $2 event, $3 fields (JSON object text) -> the event's id (the layout's
-- publish_event: NOTIFY bullmq_events, trimming).
SELECT publish_event($1::text, $2::text, $3::jsonb);

-- name: trim
-- $1 queue: keep its newest `opts.maxLenEvents` events (10000 when unset; 0 keeps all),
-- under the layout's per-queue trimming lock (`bullmq:evtrim:<queue>`, tried, never
-- waited for). The layout's publish_event trims in chunks; the events of a bulk add are
-- written in one INSERT that never trims, so psyq trims after one. Qualified ({schema}.):
-- it runs on the application's transaction too.
WITH bound AS (
  SELECT COALESCE(
    (SELECT value::integer FROM {schema}.meta WHERE queue = $1 AND field = 'opts.maxLenEvents'),
    10000) AS max_len
), cutoff AS (
  SELECT e.id FROM {schema}.event e
   WHERE e.queue = $1 AND (SELECT max_len FROM bound) > 0
   ORDER BY e.id DESC
  OFFSET (SELECT max_len FROM bound) LIMIT 1
)
DELETE FROM {schema}.event
 WHERE EXISTS (SELECT 1 FROM cutoff)  -- a one-time filter: nothing read when nothing to trim
   AND pg_try_advisory_xact_lock(hashtext('bullmq:evtrim:' || $1::text))
   AND queue = $1 AND id <= (SELECT id FROM cutoff);
