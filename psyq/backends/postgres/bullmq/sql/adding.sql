-- Adding jobs through the layout's own functions, with the server's clock.
-- bulk: $1 queue, $2 entries; flow: $1 entries. Entries: a JSON array of BullMQ's batch
-- entries (queue, id, name, data as JSON text, opts, priority, delay, attempts, lifo,
-- parentQueue, parentId, parentKey, dedupId); an entry without `timestamp` is stamped
-- with the server's clock.
-- Returns (id, now) per entry in input order. Events: added, waiting | delayed (written
-- by the layout's functions, which also NOTIFY bullmq_jobs).

-- name: bulk
-- Entries without parent or deduplication: one set-based insert (add_jobs_bulk).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), entries AS (
  SELECT jsonb_agg(
           CASE WHEN entry ? 'timestamp' THEN entry
                ELSE entry || jsonb_build_object('timestamp', clock.now) END
           ORDER BY n) AS list
    FROM clock, jsonb_array_elements($2::jsonb) WITH ORDINALITY AS given(entry, n)
)
SELECT added.id, clock.now
  FROM clock, entries, LATERAL add_jobs_bulk($1::text, entries.list) WITH ORDINALITY AS added(id, n)
 ORDER BY added.n;

-- name: flow
-- Any entries (parents, deduplication): the layout's add_flow, one atomic statement.
-- An id that is a negative integer is an error code (-5: the parent is missing).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), entries AS (
  SELECT jsonb_agg(
           CASE WHEN entry ? 'timestamp' THEN entry
                ELSE entry || jsonb_build_object('timestamp', clock.now) END
           ORDER BY n) AS list
    FROM clock, jsonb_array_elements($1::jsonb) WITH ORDINALITY AS given(entry, n)
)
SELECT added.id, clock.now
  FROM clock, entries, LATERAL add_flow(entries.list) WITH ORDINALITY AS added(id, n)
 ORDER BY added.n;

-- name: records
-- $1 queue, $2 ids -> the rows of those jobs (for ids that already existed).
SELECT * FROM job WHERE queue = $1 AND id = ANY($2::text[]);
