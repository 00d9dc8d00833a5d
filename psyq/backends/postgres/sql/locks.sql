-- The layout's locks taken up front, in one global order, by a statement that would
-- otherwise take several of them in its callers' order (psyq/backends/postgres/locks.py
-- says which, and why this order). Transaction locks: they hold to the commit, and the
-- layout's functions called next in the same transaction take them again without
-- waiting (they stack).

-- name: take
-- $1 queues, $2 lock names, $3 their kinds ('parent', 'dedup', 'job', 'retain'), $4 a
-- queue and $5 ids of its jobs about to be finished (their parent's lock, their own when
-- they have children, their deduplication id's, the retention lock of each kind their own options
-- trim by count or age: psyq:retain:<kind>:<queue>, as locks.retention_lock names it) ->
-- the locks taken. The order, one lock after the other (the sorted subquery feeds the
-- aggregate in its order): the finalization lock of every queue (the given ones, $4, the
-- jobs' parents'), shared, by key, as Node BullMQ 6.7's producers and finishers take it;
-- then the names by kind (parent, dedup, job, retain) and, within a kind, by key,
-- hashtext(name), the order Node BullMQ 6.7's add_flow takes its batch's deduplication
-- locks in. Qualified ({schema}.): it runs on the application's transaction too.
WITH finishing AS (
  SELECT queue, id, parent_queue, parent_id, dedup_id, opts FROM {schema}.job
   WHERE queue = $4::text AND id = ANY($5::text[])
), named AS (
  SELECT given.name, given.kind FROM unnest($2::text[], $3::text[]) AS given(name, kind)
  UNION ALL
  SELECT 'bullmq:parent:' || parent_queue || ':' || parent_id, 'parent'
    FROM finishing WHERE parent_id IS NOT NULL
  UNION ALL
  SELECT 'bullmq:parent:' || queue || ':' || id, 'parent' FROM finishing
   WHERE EXISTS (SELECT 1 FROM {schema}.job_dependency AS d
                  WHERE d.parent_queue = finishing.queue AND d.parent_id = finishing.id)
  UNION ALL
  SELECT 'bullmq:dedup:' || queue || ':' || dedup_id, 'dedup'
    FROM finishing WHERE dedup_id IS NOT NULL
  UNION ALL
  SELECT 'psyq:retain:' || kept.kind || ':' || queue, 'retain'
    FROM finishing,
         (VALUES ('completed', 'removeOnComplete'), ('failed', 'removeOnFail'))
           AS kept(kind, option)
   WHERE jsonb_typeof(opts -> kept.option) IN ('number', 'object')
), queues AS (
  SELECT unnest($1::text[]) AS queue
  UNION ALL SELECT $4::text
  UNION ALL SELECT parent_queue FROM finishing
)
SELECT count(CASE WHEN ordered.shared
                  THEN pg_advisory_xact_lock_shared(hashtext('bullmq:finalization'), ordered.key)
                  ELSE pg_advisory_xact_lock(ordered.key) END)
  FROM (SELECT DISTINCT true AS shared, 0 AS rank, hashtext(queue) AS key
          FROM queues WHERE queue IS NOT NULL
        UNION
        SELECT DISTINCT false, array_position(ARRAY['parent', 'dedup', 'job', 'retain'], kind),
               hashtext(name)
          FROM named
         ORDER BY 1 DESC, 2, 3) AS ordered;

-- name: obliterate
-- $1 queue: what obliterate takes before it deletes, in the global order: the queue's
-- finalization lock, exclusive (Node BullMQ 6.7's obliterate takes it first; producers
-- and finishers take it shared, so none is half-way through the queue's rows), then the
-- queue's deduplication keys' rows by id (as Node BullMQ 6.7's obliterate locks them), so
-- a producer of a client that takes no finalization lock (bullmq for Python 3.4) and
-- holds a key never waits for a job this call deletes -> the keys locked.
WITH finalizing AS MATERIALIZED (
  SELECT count(pg_advisory_xact_lock(hashtext('bullmq:finalization'), hashtext($1::text))) AS n
)
SELECT count(keys.dedup_id)
  FROM finalizing
  LEFT JOIN LATERAL (SELECT dedup_id FROM dedup
                      WHERE queue = $1::text AND finalizing.n = 1
                      ORDER BY dedup_id
                        FOR UPDATE) AS keys ON true;
