-- Adding jobs through the layout's own functions, with the server's clock. Every name of
-- the layout is qualified ({schema}., statements.py): these run on the application's
-- transaction too, under its search_path.
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
), admitted AS (
  -- every maxSize of the batch, before a row is written (groups.sql); the trigger puts
  -- the jobs in their lines
  SELECT {schema}.psyq_group_admit_entries($2::jsonb) AS ok
), entries AS (
  SELECT jsonb_agg(
           CASE WHEN entry ? 'timestamp' THEN entry
                ELSE entry || jsonb_build_object('timestamp', clock.now) END
           ORDER BY n) AS list
    FROM clock, admitted, jsonb_array_elements($2::jsonb) WITH ORDINALITY AS given(entry, n)
   WHERE admitted.ok
)
SELECT added.id, clock.now
  FROM clock, entries, LATERAL {schema}.add_jobs_bulk($1::text, entries.list) WITH ORDINALITY AS added(id, n)
 ORDER BY added.n;

-- name: flow
-- Any entries (parents, deduplication): the layout's add_flow, one atomic statement.
-- An id that is a negative integer is an error code (-5: the parent is missing).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), admitted AS (
  -- every maxSize of the batch, before a row is written (groups.sql); the trigger puts
  -- the jobs in their lines
  SELECT {schema}.psyq_group_admit_entries($1::jsonb) AS ok
), entries AS (
  SELECT jsonb_agg(
           CASE WHEN entry ? 'timestamp' THEN entry
                ELSE entry || jsonb_build_object('timestamp', clock.now) END
           ORDER BY n) AS list
    FROM clock, admitted, jsonb_array_elements($1::jsonb) WITH ORDINALITY AS given(entry, n)
   WHERE admitted.ok
)
SELECT added.id, clock.now
  FROM clock, entries, LATERAL {schema}.add_flow(entries.list) WITH ORDINALITY AS added(id, n)
 ORDER BY added.n;

-- name: records
-- $1 queue, $2 ids -> the rows of those jobs (for ids that already existed).
SELECT * FROM {schema}.job WHERE queue = $1 AND id = ANY($2::text[]);

-- name: one
-- One job through the layout's add_job (which also announces an existing custom id:
-- "duplicated"). $1 queue, $2 id ('' for the next of the queue's counter), $3 name,
-- $4 data, $5 opts, $6 priority, $7 delay, $8 timestamp (NULL: the server's clock),
-- $9 attempts, $10 parent queue, $11 parent id, $12 parent key, $13 dedup id, $14 lifo
-- -> (id, now). Errors: -5 the parent is missing, -7 the job has another parent; a
-- group's maxSize (PQG01, groups.sql psyq_group_admit).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), admitted AS (
  SELECT {schema}.psyq_group_admit(ARRAY[$1::text], ARRAY[$5::jsonb -> 'group' ->> 'id'],
                                   ARRAY[($5::jsonb -> 'group' ->> 'maxSize')::integer],
                                   ARRAY[false]) AS ok
)
SELECT {schema}.add_job($1::text, $2::text, $3::text, $4::jsonb, $5::jsonb, $6::integer, $7::bigint,
               COALESCE($8::bigint, clock.now), $9::integer, $10::text, $11::text,
               $12::text, $13::text, NULL, $14::boolean) AS id,
       clock.now
  FROM clock, admitted
 WHERE admitted.ok;
