-- events: a queue's event feed, bounded like a stream (queues.max_len_events).
-- Effects: appends the events of one transaction with consecutive sequence numbers taken
-- from queues.event_seq (the row lock orders writers, so readers never skip an event),
-- trims the oldest past max_len every 100 events, and NOTIFYs readers.
-- Events: whatever the transition emitted. Returns: nothing.

-- name: append
-- $1 qkey, $2 queue name, $3 event names, $4 job ids, $5 fields (JSON text), $6 channel
WITH q AS (
    INSERT INTO queues (qkey, name, event_seq) VALUES ($1, $2, cardinality($3::text[]))
    ON CONFLICT (qkey) DO UPDATE SET event_seq = queues.event_seq + EXCLUDED.event_seq
    RETURNING event_seq, max_len_events
), added AS (
    INSERT INTO events (qkey, seq, ms, event, job_id, fields)
    SELECT $1, q.event_seq - cardinality($3::text[]) + e.ord, now_ms(), e.name, e.job_id,
           e.fields::jsonb
    FROM q, unnest($3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS e(name, job_id, fields, ord)
), trimmed AS (
    DELETE FROM events d USING q
    WHERE d.qkey = $1 AND d.seq <= q.event_seq - q.max_len_events
      AND q.event_seq / 100 <> (q.event_seq - cardinality($3::text[])) / 100
)
SELECT pg_notify($6::text, 'e:' || $1) FROM q;

-- name: wake
-- $1 channel, $2 payloads ("j:<qkey>": a job may be ready)
SELECT pg_notify($1::text, p) FROM unnest($2::text[]) AS p;

-- name: last_seq
SELECT COALESCE((SELECT event_seq FROM queues WHERE qkey = $1), 0);

-- name: read
-- $2 after this sequence number, $3 most events. Only the newest max_len are readable.
SELECT e.seq, e.ms, e.event, e.job_id, e.fields::text AS fields
FROM events e JOIN queues q ON q.qkey = e.qkey
WHERE e.qkey = $1 AND e.seq > $2 AND e.seq > q.event_seq - q.max_len_events
ORDER BY e.seq
LIMIT $3;

-- name: set_max_len
-- $2 queue name, $3 max length
INSERT INTO queues (qkey, name, max_len_events) VALUES ($1, $2, $3)
ON CONFLICT (qkey) DO UPDATE SET max_len_events = EXCLUDED.max_len_events;
