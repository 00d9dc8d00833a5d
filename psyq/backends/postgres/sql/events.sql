-- events: a queue's event feed, bounded like a stream (queues.max_len_events).
-- Writers append a transaction's events with no sequence number (append: no lock shared by
-- the writers of a queue) and NOTIFY readers. Before reading, the sequencer numbers the
-- committed events in insertion order under the queue row's lock (lock_queue, then
-- number in a new statement, so it sees everything committed before the lock was
-- granted); an event that commits late gets a later number, so a reader that resumes after
-- a number never skips one. The sequencer also trims events past max_len.
-- Events: whatever the transition emitted. Returns: per statement.

-- name: append
-- $1 qkey, $2 event names, $3 job ids, $4 fields (JSON text), $5 channel.
-- Returns the id of the last event appended.
WITH added AS (
    INSERT INTO events (qkey, ms, event, job_id, fields)
    SELECT $1, now_ms(), e.name, e.job_id, e.fields::jsonb
    FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS e(name, job_id, fields, ord)
    ORDER BY e.ord
    RETURNING id
)
SELECT max(id), notify_heard($5::text, 'e:' || $1) FROM added;

-- name: wake
-- $1 channel, $2 payloads ("j:<qkey>": a job may be ready)
SELECT notify_heard($1::text, p) FROM unnest($2::text[]) AS p;

-- name: lock_queue
-- $1 qkey (its row exists: common.ensure_queue). Returns the newest sequence number and
-- the bound.
SELECT event_seq, max_len_events FROM queues WHERE qkey = $1 FOR UPDATE;

-- name: number
-- $1 qkey, $2 the newest sequence number. Returns the new newest sequence number.
-- Rows are matched by address (ctid): the statement's own snapshot, under the queue lock.
WITH pending AS (
    SELECT ctid AS row, row_number() OVER (ORDER BY id) AS n
    FROM events WHERE qkey = $1 AND seq IS NULL
), numbered AS (
    UPDATE events e SET seq = $2 + p.n FROM pending p WHERE e.ctid = p.row RETURNING e.seq
)
SELECT COALESCE(max(seq), $2) FROM numbered;

-- name: store_seq
-- $1 qkey, $2 newest sequence number, $3 trim events at or below this number
WITH trimmed AS (
    DELETE FROM events WHERE qkey = $1 AND seq <= $3
)
UPDATE queues SET event_seq = $2 WHERE qkey = $1;

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
