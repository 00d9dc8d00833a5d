-- A queue's event policy and its readers' leases (readers.py). The policy is the layout's
-- `meta` row `psyq.events` (absent: `always`, what Node BullMQ expects); under
-- `when-read` psyq's own statements (fast.sql) write a queue's event rows only while a
-- lease in `psyq_event_reader` is alive for it.

-- name: policy
-- $1 queue, $2 policy: `when-read` stores the row, `always` removes it.
WITH gone AS (
  DELETE FROM meta WHERE queue = $1 AND field = 'psyq.events' AND $2::text = 'always'
)
INSERT INTO meta (queue, field, value)
SELECT $1, 'psyq.events', $2::text WHERE $2::text <> 'always'
ON CONFLICT (queue, field) DO UPDATE SET value = EXCLUDED.value;

-- name: hold
-- $1 queues, $2 reader, $3 lease ms: take or renew the reader's leases of these queues,
-- forgetting their expired ones (readers that died leave no rows behind).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), forgotten AS (
  DELETE FROM psyq_event_reader USING clock
   WHERE queue = ANY($1::text[]) AND expires <= clock.now
)
INSERT INTO psyq_event_reader (queue, reader, expires)
SELECT q.queue, $2, clock.now + $3::bigint FROM clock, unnest($1::text[]) AS q(queue)
ON CONFLICT (queue, reader) DO UPDATE SET expires = EXCLUDED.expires;

-- name: release
-- $1 queue, $2 reader: the reader's lease of the queue ends.
DELETE FROM psyq_event_reader WHERE queue = $1 AND reader = $2;
