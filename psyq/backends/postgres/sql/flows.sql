-- add_flow / get_flow / move_to_waiting_children / get_dependencies: job trees.
-- Parameters: per statement. Effects: deps rows link a parent ($1 parent qkey, $2 parent
-- id) to its children by key; a child's end updates its row (processed with its value,
-- failed / ignored with its reason, or deleted). add_flow writes a flow's new jobs and
-- their links with one statement each (insert, link_children). Events: added, then
-- waiting | delayed | waiting-children per new job, duplicated per skipped one (add_flow);
-- waiting-children, waiting (prev waiting-children), failed; all written by the caller.
-- Return codes: PENDING_CHILDREN.

-- name: set_link
-- $3 child key, $4 status, $5 value
UPDATE deps SET status = $4, value = $5
WHERE parent_qkey = $1 AND parent_id = $2 AND child_key = $3;

-- name: drop_link
-- $3 child key. Drops a pending link; returns a row when there was one.
DELETE FROM deps
WHERE parent_qkey = $1 AND parent_id = $2 AND child_key = $3 AND status = 'pending'
RETURNING status;

-- name: pending_count
SELECT count(*) FROM deps WHERE parent_qkey = $1 AND parent_id = $2 AND status = 'pending';

-- name: links
-- Pending children first (by key), then the others.
SELECT child_key, status, value FROM deps
WHERE parent_qkey = $1 AND parent_id = $2
ORDER BY status <> 'pending', child_key;

-- name: insert
-- add_flow: the new jobs of a flow, every queue in one statement. $1.. one array per
-- column (qkey first), one element per job. Returns nothing: the caller knows every
-- column it wrote, and the others take their defaults.
INSERT INTO jobs (qkey, id, name, data, opts, timestamp, delay, priority, parent_key, state,
                  seq, due)
SELECT j.qkey, j.id, j.name, j.data, j.opts::jsonb, j.ts, j.delay, j.priority, j.parent_key,
       j.state, j.seq, j.due
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
            $7::bigint[], $8::integer[], $9::text[], $10::text[], $11::bigint[], $12::bigint[])
     AS j(qkey, id, name, data, opts, ts, delay, priority, parent_key, state, seq, due);

-- name: link_children
-- add_flow: a pending link per new child. $1 parent qkeys, $2 parent ids, $3 child keys.
INSERT INTO deps (parent_qkey, parent_id, child_key, status)
SELECT l.parent_qkey, l.parent_id, l.child_key, 'pending'
FROM unnest($1::text[], $2::text[], $3::text[]) AS l(parent_qkey, parent_id, child_key)
ON CONFLICT (parent_qkey, parent_id, child_key) DO UPDATE SET status = 'pending', value = NULL;

-- name: insert_with_events
-- insert, and each new job's events (added, then waiting | delayed | waiting-children),
-- appended unnumbered in the order of the arrays, as events.append does; $13 channel.
-- Returns one row per queue: qkey, last_event (the id of its last event), span (its last
-- event's id minus its first's, plus one: the queues' events interleave).
WITH j AS (
    SELECT *
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
                $7::bigint[], $8::integer[], $9::text[], $10::text[], $11::bigint[],
                $12::bigint[])
         WITH ORDINALITY
         AS j(qkey, id, name, data, opts, ts, delay, priority, parent_key, state, seq, due, n)
), added AS (
    INSERT INTO jobs (qkey, id, name, data, opts, timestamp, delay, priority, parent_key,
                      state, seq, due)
    SELECT j.qkey, j.id, j.name, j.data, j.opts::jsonb, j.ts, j.delay, j.priority,
           j.parent_key, j.state, j.seq, j.due
    FROM j
), told AS (
    INSERT INTO events (qkey, ms, event, job_id, fields)
    SELECT j.qkey, now_ms(), e.event, j.id, e.fields
    FROM j CROSS JOIN LATERAL (VALUES
        (1, 'added', jsonb_build_object('name', j.name)),
        (2, CASE WHEN j.state IN ('delayed', 'waiting-children') THEN j.state
                 ELSE 'waiting' END,
            CASE WHEN j.state = 'delayed' THEN jsonb_build_object('delay', j.due)
                 ELSE '{}'::jsonb END)
    ) AS e(k, event, fields)
    ORDER BY j.n, e.k
    RETURNING qkey, id
)
SELECT qkey, max(id) AS last_event, max(id) - min(id) + 1 AS span,
       notify_heard($13::text, 'e:' || qkey) AS notified
FROM told
GROUP BY qkey;
