-- add_jobs: add jobs to one queue, all or none (the caller's transaction).
-- Parameters: per statement ($1 qkey). Effects: the queue row exists; auto ids come from
-- queues.last_id (its row lock orders concurrent adds); all jobs of a call are written by
-- one INSERT over arrays (unnest). Dedup keys and flow links are written alongside.
-- Events (written by the caller through events.sql): added, then waiting | delayed |
-- waiting-children per job; duplicated / deduplicated / removed for skipped adds.
-- Return codes: a child whose parent is missing is JOB_MISSING (nothing is written).

-- name: take_ids
-- $2 queue name, $3 how many auto ids. Returns the last id taken.
INSERT INTO queues (qkey, name, last_id) VALUES ($1, $2, $3)
ON CONFLICT (qkey) DO UPDATE SET last_id = queues.last_id + EXCLUDED.last_id
RETURNING last_id;

-- name: next_seqs
-- $1 how many sequence numbers
SELECT nextval('job_seq') FROM generate_series(1, $1::integer);

-- name: existing
-- $2 ids
SELECT * FROM jobs WHERE qkey = $1 AND id = ANY($2::text[]);

-- name: insert
-- $2.. one array per column, one element per job
INSERT INTO jobs (qkey, id, name, data, opts, timestamp, delay, priority, parent_key, state,
                  seq, due)
SELECT $1, j.id, j.name, j.data, j.opts::jsonb, j.ts, j.delay, j.priority, j.parent_key,
       j.state, j.seq, j.due
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[],
            $8::integer[], $9::text[], $10::text[], $11::bigint[], $12::bigint[])
     AS j(id, name, data, opts, ts, delay, priority, parent_key, state, seq, due)
RETURNING *;

-- name: link_child
-- $1 parent qkey, $2 parent id, $3 child key
INSERT INTO deps (parent_qkey, parent_id, child_key, status) VALUES ($1, $2, $3, 'pending')
ON CONFLICT (parent_qkey, parent_id, child_key) DO UPDATE SET status = 'pending', value = NULL;

-- name: dedup_entry
-- $2 dedup id
SELECT job_id, expires FROM dedup WHERE qkey = $1 AND dedup_id = $2 FOR UPDATE;

-- name: dedup_set
-- $2 dedup id, $3 job id, $4 expiry ms (NULL: until the job finishes)
INSERT INTO dedup (qkey, dedup_id, job_id, expires) VALUES ($1, $2, $3, $4)
ON CONFLICT (qkey, dedup_id) DO UPDATE SET job_id = EXCLUDED.job_id, expires = EXCLUDED.expires;

-- name: dedup_delete
DELETE FROM dedup WHERE qkey = $1 AND dedup_id = $2;

-- name: insert_plain
-- The whole add in one statement, for jobs without a custom id, dedup key or parent:
-- auto ids, the rows, their events (added, then waiting | delayed) and the NOTIFYs.
-- The queue row's lock (taken by the id upsert, held to the commit) orders this add with
-- the events sequencer, so the add numbers its own events (queues.event_seq + 1 ...):
-- they are never renumbered, and events appended unnumbered before it get later numbers
-- from the sequencer (a reader still never skips one). Events past max_len_events are
-- trimmed here too.
-- $2 queue name, $3 names, $4 data, $5 opts (JSON text), $6 timestamps (NULL: now),
-- $7 delays, $8 priorities, $9 lifo flags, $10 channel.
-- Returns one row: last_id (the jobs' ids are last_id - n + 1 .. last_id, in input
-- order) and now (the store's clock, the timestamp of jobs given none). Rows are not
-- returned: the caller knows every column.
WITH ids AS (
    INSERT INTO queues (qkey, name, last_id, event_seq)
    VALUES ($1, $2, cardinality($3::text[]), 2 * cardinality($3::text[]))
    ON CONFLICT (qkey) DO UPDATE
    SET last_id = queues.last_id + EXCLUDED.last_id,
        event_seq = queues.event_seq + EXCLUDED.event_seq
    RETURNING last_id, event_seq, max_len_events
), j AS (
    SELECT (ids.last_id - cardinality($3::text[]) + u.n)::text AS id, u.name, u.data, u.opts,
           COALESCE(u.ts, now_ms()) AS ts, u.delay, u.priority, u.lifo, u.n,
           ids.event_seq - 2 * cardinality($3::text[]) + 2 * u.n AS event_seq
    FROM ids, unnest($3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[],
                     $8::integer[], $9::boolean[])
              WITH ORDINALITY AS u(name, data, opts, ts, delay, priority, lifo, n)
), added AS (
    INSERT INTO jobs (qkey, id, name, data, opts, timestamp, delay, priority, state, seq, due)
    SELECT $1, j.id, j.name, j.data, j.opts::jsonb, j.ts, j.delay, j.priority,
           CASE WHEN j.delay > 0 THEN 'delayed'
                WHEN j.priority > 0 THEN 'prioritized'
                ELSE 'waiting' END,
           CASE WHEN j.lifo AND j.delay = 0 THEN -nextval('job_seq') ELSE nextval('job_seq') END,
           CASE WHEN j.delay > 0 THEN j.ts + j.delay END
    FROM j ORDER BY j.n
), events_added AS (
    INSERT INTO events (qkey, seq, ms, event, job_id, fields)
    SELECT $1, j.event_seq - 2 + e.k, now_ms(), e.event, j.id, e.fields
    FROM j CROSS JOIN LATERAL (VALUES
        (1, 'added', jsonb_build_object('name', j.name)),
        (2, CASE WHEN j.delay > 0 THEN 'delayed' ELSE 'waiting' END,
            CASE WHEN j.delay > 0 THEN jsonb_build_object('delay', j.ts + j.delay)
                 ELSE '{}'::jsonb END)
    ) AS e(k, event, fields)
), trimmed AS (
    DELETE FROM events
    WHERE qkey = $1 AND seq <= (SELECT event_seq - max_len_events FROM ids)
)
SELECT ids.last_id, now_ms() AS now,
       notify_heard($10::text, 'e:' || $1) AS events_notified,
       notify_heard($10::text, 'j:' || $1) AS jobs_notified
FROM ids;
