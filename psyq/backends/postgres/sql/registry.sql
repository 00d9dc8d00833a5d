-- What the layout has no place for, in psyq's own tables beside BullMQ's (prefixed psyq_,
-- never touching BullMQ's objects): the worker registry, cancellation requests, and
-- finished-job counts not yet folded into the layout's metrics rows, and the leases of
-- event readers (readers.sql).

-- name: create
-- Created when psyq opens the schema (idempotent; run under the schema's advisory lock).
CREATE TABLE IF NOT EXISTS psyq_worker (
  queue   text   NOT NULL,
  name    text   NOT NULL,
  info    jsonb  NOT NULL,
  started bigint NOT NULL,
  expires bigint NOT NULL,
  PRIMARY KEY (queue, name)
);
CREATE TABLE IF NOT EXISTS psyq_finished (
  id     bigserial PRIMARY KEY,  -- append-only: counting a finish locks no shared row
  queue  text    NOT NULL,
  kind   text    NOT NULL,       -- 'completed' | 'failed'
  at_ms  bigint  NOT NULL,
  jobs   integer NOT NULL
);
CREATE TABLE IF NOT EXISTS psyq_cancel (
  queue   text    NOT NULL,
  job_id  text    NOT NULL,
  attempt integer NOT NULL,  -- the job's attempts_started when it was cancelled
  reason  text    NOT NULL,
  PRIMARY KEY (queue, job_id)
);
CREATE TABLE IF NOT EXISTS psyq_event_reader (
  queue   text   NOT NULL,
  reader  text   NOT NULL,  -- one per backend instance that reads the queue's events
  expires bigint NOT NULL,  -- ms: the lease ends here unless renewed
  PRIMARY KEY (queue, reader)
);

-- name: register
-- $1 queue, $2 worker name, $3 info (JSON), $4 TTL ms. Also forgets the queue's expired
-- entries, so workers that died leave no rows behind.
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), forgotten AS (
  DELETE FROM psyq_worker USING clock WHERE queue = $1 AND expires <= clock.now
)
INSERT INTO psyq_worker (queue, name, info, started, expires)
SELECT $1, $2, $3::text::jsonb, clock.now, clock.now + $4::bigint FROM clock
ON CONFLICT (queue, name) DO UPDATE
SET info = EXCLUDED.info, started = EXCLUDED.started, expires = EXCLUDED.expires;

-- name: heartbeat
-- $1 queues, $2 worker names, $3 infos (JSON), $4 TTL ms: renew every worker this
-- backend runs (an entry that expired meanwhile is written again).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
)
INSERT INTO psyq_worker (queue, name, info, started, expires)
SELECT w.queue, w.name, w.info::jsonb, clock.now, clock.now + $4::bigint
  FROM clock, unnest($1::text[], $2::text[], $3::text[]) AS w(queue, name, info)
ON CONFLICT (queue, name) DO UPDATE SET expires = EXCLUDED.expires;

-- name: unregister
-- $1 queue, $2 worker name.
DELETE FROM psyq_worker WHERE queue = $1 AND name = $2;

-- name: workers
-- $1 queue -> the registered workers whose entry has not expired, oldest first.
SELECT name, info::text AS info, started FROM psyq_worker
 WHERE queue = $1 AND expires > (extract(epoch FROM clock_timestamp()) * 1000)::bigint
 ORDER BY started, name;

-- name: node_workers
-- $1 queue, $2 psyq's suffix (`:w:psyq`) -> Node BullMQ's workers of the queue, found as
-- BullMQ's Postgres backend finds them: sessions of this database whose application_name
-- is the queue's name or `<queue>:w:<worker name>` (each Node worker names its LISTEN
-- connection so; like Node, whatever the schema), but for psyq's own workers' sessions
-- (`<queue>:w:psyq`, listed from the registry) -> (name, addr, started ms), oldest first.
SELECT application_name AS name,
       COALESCE(host(client_addr) || ':' || client_port, 'local') AS addr,
       (extract(epoch FROM backend_start) * 1000)::bigint AS started
  FROM pg_stat_activity
 WHERE datname = current_database()
   AND (application_name = $1 OR left(application_name, length($1) + 3) = $1 || ':w:')
   AND application_name <> left($1 || $2, 63)  -- Postgres keeps 63 bytes of a name
 ORDER BY backend_start, pid;

-- name: cancel
-- $1 queue, $2 job id, $3 reason -> a row when the job was active (its current attempt
-- is cancelled; a later attempt is not).
INSERT INTO psyq_cancel (queue, job_id, attempt, reason)
SELECT queue, id, attempts_started, $3 FROM job
 WHERE queue = $1 AND id = $2 AND state = 'active'
ON CONFLICT (queue, job_id) DO UPDATE
SET attempt = EXCLUDED.attempt, reason = EXCLUDED.reason
RETURNING job_id;

-- name: cancelled
-- $1 queue, $2 job ids -> (id, reason) of those whose current attempt was cancelled.
SELECT job.id, psyq_cancel.reason
  FROM psyq_cancel
  JOIN job ON job.queue = psyq_cancel.queue AND job.id = psyq_cancel.job_id
 WHERE psyq_cancel.queue = $1 AND psyq_cancel.job_id = ANY($2::text[])
   AND job.state = 'active' AND job.attempts_started = psyq_cancel.attempt;
