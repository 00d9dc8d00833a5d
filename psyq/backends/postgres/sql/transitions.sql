-- Fetching and settling through the layout's functions, with the server's clock.
-- Errors: the functions raise SQLSTATE BM001 with the code in DETAIL (-1 missing job,
-- -3 not active, -4 pending children, -6 lock mismatch, -9 failed children).
-- Events (written by the functions): waiting (promoted), active, completed, failed,
-- retries-exhausted, delayed, drained, stalled.

-- name: take
-- $1 queue, $2 tokens (one job per token), $3 lock ms, $4 worker name, $5 limiter max,
-- $6 limiter duration ms -> the rows of the jobs taken, in token order. Each call of
-- move_to_active promotes due delayed jobs and honours pause, global concurrency and
-- the limiter; later calls see what earlier ones took. A queue held by hand (a limiter
-- window filled to the layout's "full" mark, 2^53 - 1 points) gives nothing, whatever
-- limiter the worker has. move_to_active runs once per job there is to take (waiting or
-- due when the statement starts; at least once, to promote), not once per token.
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
)
SELECT taken.*
  FROM clock,
       unnest(CASE WHEN EXISTS (SELECT 1 FROM rate_limit
                                 WHERE queue = $1 AND expire_at_ms > clock.now
                                   AND points >= 9007199254740991)
                   THEN '{}'::text[]
                   ELSE ($2::text[])[1:GREATEST(1,
                          (SELECT count(*) FROM (SELECT 1 FROM job
                                                  WHERE queue = $1 AND state = 'waiting'
                                                  LIMIT cardinality($2::text[])) AS ready)
                          + (SELECT count(*) FROM (SELECT 1 FROM job
                                                    WHERE queue = $1 AND state = 'delayed'
                                                      AND process_at_ms <= clock.now
                                                    LIMIT cardinality($2::text[])) AS due))]
              END)
         WITH ORDINALITY AS slot(token, n),
       LATERAL move_to_active($1::text, slot.token, $3::bigint, clock.now, $4::text,
                              $5::integer, $6::bigint) AS taken
 ORDER BY slot.n;

-- name: held
-- $1 queue, $2 tokens -> the rows of the queue's active jobs locked under one of the
-- tokens: asked before a take is sent again after its connection was lost, they are the
-- jobs the lost attempt took (its commit done, its reply lost; a take's tokens are fresh).
SELECT * FROM job
 WHERE queue = $1 AND state = 'active' AND lock_token = ANY($2::text[]);

-- name: held_after
-- $1 queue, $2 tokens, $3 the id of the job the call completes -> as held, for a call whose
-- tokens may be the caller's own (Job.move_to_completed with fetch-next passes the token of
-- the job it completes, and BullMQ's manual processing reuses one token): only jobs taken
-- when or after job $3 completed (the lost attempt took them in the statement or the
-- transaction that completed it), never job $3; none when job $3 is not completed (the
-- lost attempt did not commit, or retention removed the job).
SELECT * FROM job
 WHERE queue = $1 AND state = 'active' AND lock_token = ANY($2::text[]) AND id <> $3
   AND processed_at_ms >= (SELECT finished_at_ms FROM job
                            WHERE queue = $1 AND id = $3 AND state = 'completed');

-- name: complete
-- $1 queue, $2 id, $3 token, $4 return value (JSON text), $5 count it in the metrics now,
-- $6 the worker's removeOnComplete (JSON text or NULL) -> finished_on. Retention comes
-- from the job's own removeOnComplete (true, a count, or {age, count}), else the worker's. The finish is
-- counted for the layout's per-minute metrics (a week of points, as Node workers with the
-- `metrics` option count): appended to psyq_finished, folded into them by `fold`.
-- Qualified ({schema}.): it runs on the application's transaction too (complete_in).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), keep AS (
  SELECT COALESCE(opts -> 'removeOnComplete', $6::jsonb) AS k
    FROM {schema}.job WHERE queue = $1 AND id = $2
), counted AS (
  INSERT INTO {schema}.psyq_finished (queue, kind, at_ms, jobs)
  SELECT $1, 'completed', clock.now, 1 FROM clock WHERE $5::boolean
)
SELECT {schema}.move_to_completed(
         $1::text, $2::text, $3::text, $4::jsonb, clock.now,
         COALESCE(keep.k = 'true'::jsonb, false),
         CASE jsonb_typeof(keep.k) WHEN 'object' THEN (keep.k ->> 'age')::bigint END,
         CASE jsonb_typeof(keep.k) WHEN 'number' THEN (keep.k #>> '{}')::integer
                                   WHEN 'object' THEN (keep.k ->> 'count')::integer END)
  FROM clock LEFT JOIN keep ON true;

-- name: complete_many
-- $1 queue, $2 ids, $3 tokens, $4 return values (JSON text), $5 the worker's
-- removeOnComplete per job (JSON text or NULL): as complete for each, in
-- one statement (any refusal fails it whole: the caller then settles one by one); not
-- counted (see count).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), item AS (
  SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY
                AS item(id, token, value, worker_keep, n)
), keep AS (
  SELECT item.n, COALESCE(job.opts -> 'removeOnComplete', item.worker_keep::jsonb) AS k
    -- each job by its primary key: a LATERAL with LIMIT is not flattened into a join, which
    -- a planner without statistics (a table never analysed) makes a scan of the queue's jobs
    FROM item LEFT JOIN LATERAL (SELECT * FROM job
                                  WHERE job.queue = $1 AND job.id = item.id LIMIT 1) AS job
           ON true
)
SELECT move_to_completed(
         $1::text, item.id, item.token, item.value::jsonb, clock.now,
         COALESCE(keep.k = 'true'::jsonb, false),
         CASE jsonb_typeof(keep.k) WHEN 'object' THEN (keep.k ->> 'age')::bigint END,
         CASE jsonb_typeof(keep.k) WHEN 'number' THEN (keep.k #>> '{}')::integer
                                   WHEN 'object' THEN (keep.k ->> 'count')::integer END)
  FROM clock, item JOIN keep ON keep.n = item.n
 ORDER BY item.n;

-- name: count
-- $1 queue, $2 kind ('completed' | 'failed'), $3 jobs -> the count's row id: finished
-- jobs of a settled batch, appended to psyq_finished (the layout's metrics row is one
-- lock per queue and kind; `fold` moves the counts there).
INSERT INTO psyq_finished (queue, kind, at_ms, jobs)
VALUES ($1, $2, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, $3)
RETURNING id;

-- name: fold_rows
-- $1 queue: the layout's metrics row of every kind the queue has appended counts of,
-- made when missing (as collect_metrics makes it), so `fold` can lock it before reading.
INSERT INTO metrics (queue, kind)
SELECT DISTINCT $1, kind FROM psyq_finished WHERE queue = $1
ON CONFLICT (queue, kind) DO NOTHING;

-- name: fold
-- $1 queue: move the queue's appended counts into the layout's metrics rows, unless
-- another fold of the queue is under way; returns the jobs folded. The rows end as the
-- layout's collect_metrics (what Node workers with the `metrics` option call once per
-- finished job) would leave them called once per job in finish order, computed here per
-- appended count: of a count's n jobs, all finished at one time, only the first can close
-- the minute (push the finished jobs since the last point, zeros for empty minutes, keep
-- 10,080 points), and each adds one to the count.
WITH RECURSIVE turn AS (
  SELECT pg_try_advisory_xact_lock(hashtext('psyq:fold:' || $1::text)) AS mine
), taken AS (
  DELETE FROM psyq_finished
   WHERE queue = $1 AND (SELECT mine FROM turn)
  RETURNING id, kind, at_ms, jobs
), step AS (
  SELECT kind, at_ms, jobs, row_number() OVER (PARTITION BY kind ORDER BY at_ms, id) AS n
    FROM taken
), start AS (
  SELECT kind, count, prev_ts, prev_count, data FROM metrics
   WHERE queue = $1 AND kind IN (SELECT kind FROM taken)
     FOR UPDATE
), folding AS (
  SELECT kind, 0::bigint AS n, count, prev_ts, prev_count, data FROM start
  UNION ALL
  SELECT f.kind, s.n, f.count + s.jobs,
         CASE WHEN f.prev_ts IS NULL OR gap.minutes > 0 THEN s.at_ms ELSE f.prev_ts END,
         CASE WHEN f.prev_ts IS NULL THEN 0
              WHEN gap.minutes > 0 THEN f.count ELSE f.prev_count END,
         CASE WHEN f.prev_ts IS NOT NULL AND gap.minutes > 0
              THEN (array_fill(0::bigint, ARRAY[(gap.minutes - 1)::integer])
                    || ARRAY[f.count - f.prev_count] || f.data)[1:10080]
              ELSE f.data END
    FROM folding AS f
    JOIN step AS s ON s.kind = f.kind AND s.n = f.n + 1,
         LATERAL (SELECT LEAST(s.at_ms / 60000 - f.prev_ts / 60000, 10080) AS minutes) AS gap
), folded AS (
  SELECT DISTINCT ON (kind) kind, count, prev_ts, prev_count, data
    FROM folding ORDER BY kind, n DESC
), written AS (
  UPDATE metrics
     SET count = folded.count, prev_ts = folded.prev_ts, prev_count = folded.prev_count,
         data = folded.data
    FROM folded
   WHERE metrics.queue = $1 AND metrics.kind = folded.kind
  RETURNING 1
)
SELECT COALESCE(sum(jobs), 0) FROM taken WHERE (SELECT count(*) FROM written) >= 0;

-- name: complete_take
-- As complete (without $5; $10 the worker's removeOnComplete), then as take for $5
-- tokens, $6 lock ms, $7 worker name, $8 limiter max, $9 limiter duration ms. The takes read the completion's finish time, so they run after
-- it, in the same statement (one round trip, one commit).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), keep AS (
  SELECT COALESCE(opts -> 'removeOnComplete', $10::jsonb) AS k
    FROM job WHERE queue = $1 AND id = $2
), done AS (
  SELECT move_to_completed(
           $1::text, $2::text, $3::text, $4::jsonb, clock.now,
           COALESCE(keep.k = 'true'::jsonb, false),
           CASE jsonb_typeof(keep.k) WHEN 'object' THEN (keep.k ->> 'age')::bigint END,
           CASE jsonb_typeof(keep.k) WHEN 'number' THEN (keep.k #>> '{}')::integer
                                     WHEN 'object' THEN (keep.k ->> 'count')::integer END)
           AS finished_on
    FROM clock LEFT JOIN keep ON true
), counted AS (
  INSERT INTO psyq_finished (queue, kind, at_ms, jobs)
  SELECT $1, 'completed', clock.now, 1 FROM clock
)
SELECT taken.*
  FROM done,
       unnest(CASE WHEN EXISTS (SELECT 1 FROM rate_limit
                                 WHERE queue = $1 AND expire_at_ms > done.finished_on
                                   AND points >= 9007199254740991)
                   THEN '{}'::text[]
                   ELSE ($5::text[])[1:GREATEST(1,
                          (SELECT count(*) FROM (SELECT 1 FROM job
                                                  WHERE queue = $1 AND state = 'waiting'
                                                  LIMIT cardinality($5::text[])) AS ready)
                          + (SELECT count(*) FROM (SELECT 1 FROM job
                                                    WHERE queue = $1 AND state = 'delayed'
                                                      AND process_at_ms <= done.finished_on
                                                    LIMIT cardinality($5::text[])) AS due))]
              END)
         WITH ORDINALITY AS slot(token, n),
       LATERAL move_to_active($1::text, slot.token, $6::bigint, done.finished_on, $7::text,
                              $8::integer, $9::bigint) AS taken
 ORDER BY slot.n;

-- name: fail
-- $1 queue, $2 id, $3 token, $4 reason, $5 stacktrace (JSON array text), $6 count it in
-- the metrics now, $7 the worker's removeOnFail (JSON text or NULL) -> finished_on.
-- Retention comes from the job's own removeOnFail, else the worker's. A count or an age
-- is applied under a per-queue lock held to the commit: failures settled at the same
-- moment by several workers each trim what the one before committed (the layout's
-- retention sees only committed rows, so without it each would keep its own view's count).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), keep AS (
  SELECT COALESCE(opts -> 'removeOnFail', $7::jsonb) AS k
    FROM job WHERE queue = $1 AND id = $2
), turn AS (
  SELECT pg_advisory_xact_lock(hashtext('psyq:retain:failed:' || $1::text)) AS mine
    FROM keep WHERE jsonb_typeof(keep.k) IN ('number', 'object')
), counted AS (
  INSERT INTO psyq_finished (queue, kind, at_ms, jobs)
  SELECT $1, 'failed', clock.now, 1 FROM clock WHERE $6::boolean
)
SELECT move_to_failed(
         $1::text, $2::text, $3::text, $4::text, $5::jsonb, clock.now,
         COALESCE(keep.k = 'true'::jsonb, false),
         CASE jsonb_typeof(keep.k) WHEN 'object' THEN (keep.k ->> 'age')::bigint END,
         CASE jsonb_typeof(keep.k) WHEN 'number' THEN (keep.k #>> '{}')::integer
                                   WHEN 'object' THEN (keep.k ->> 'count')::integer END)
  FROM clock LEFT JOIN keep ON true LEFT JOIN turn ON true;

-- name: retry_now
-- $1 queue, $2 id, $3 token, $4 reason, $5 stacktrace: back to waiting (attempts + 1),
-- at the front when the job is lifo.
SELECT retry_job($1::text, $2::text, $3::text,
                 COALESCE((SELECT (opts ->> 'lifo')::boolean FROM job
                            WHERE queue = $1 AND id = $2), false),
                 $4::text, $5::jsonb);

-- name: retry_later
-- $1 queue, $2 id, $3 token, $4 delay ms, $5 reason, $6 stacktrace: delayed by $4 from
-- now (attempts + 1).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
)
SELECT move_to_delayed($1::text, $2::text, $3::text, clock.now + $4::bigint, $4::bigint,
                       false, $5::text, $6::jsonb)
  FROM clock;

-- name: delay
-- $1 queue, $2 id, $3 token ('0': any), $4 due time ms: delayed until then, no attempt.
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
)
SELECT move_to_delayed($1::text, $2::text, $3::text, $4::bigint,
                       GREATEST($4::bigint - clock.now, 0), true, NULL, NULL)
  FROM clock;

-- name: to_wait
-- $1 queue, $2 id, $3 token -> -1 when the job is missing, else the limiter's window.
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
)
SELECT move_active_to_wait($1::text, $2::text, $3::text, clock.now) FROM clock;

-- name: extend_locks
-- $1 queue, $2 ids, $3 tokens, $4 lock ms -> the ids whose lock is no longer theirs.
-- Waits for no row (so it never deadlocks with a settle of the same worker, which locks
-- the same jobs in its own order): a job whose row another transaction holds (being
-- settled, or its progress written) is not renewed this time, and is still the caller's
-- while this statement's snapshot says so.
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), held AS (
  SELECT * FROM unnest($2::text[], $3::text[]) AS held(id, token)
), free AS (
  SELECT job.id FROM job JOIN held ON job.id = held.id
   WHERE job.queue = $1 AND job.state = 'active' AND job.lock_token = held.token
     FOR UPDATE OF job SKIP LOCKED
), renewed AS (
  UPDATE job
     SET locked_until_ms = clock.now + $4::bigint
    FROM free, clock
   WHERE job.queue = $1 AND job.id = free.id
  RETURNING job.id
)
SELECT held.id FROM held
 WHERE NOT EXISTS (SELECT 1 FROM job
                   WHERE job.queue = $1 AND job.id = held.id AND job.state = 'active'
                     AND job.lock_token = held.token);

-- name: stalled
-- $1 queue, $2 most stalls allowed -> (id, over): active jobs whose lock expired, each
-- stall counted (stalled count + 1) and announced (events: stalled), as every store and
-- BullMQ count it. Those within the limit go back to waiting now (at the end of the line);
-- those over it stay active for the caller to fail (over = true). psyq reclaims on the
-- lease's expiry instead of the layout's mark-then-sweep over two passes: a live worker
-- of any client renews its lease long before it expires.
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), expired AS (
  SELECT job.id, job.stalled_count + 1 > $2::integer AS over
    FROM job, clock
   WHERE job.queue = $1 AND job.state = 'active' AND job.locked_until_ms < clock.now
     FOR UPDATE OF job SKIP LOCKED
), moved AS (
  UPDATE job
     SET state = CASE WHEN expired.over THEN job.state ELSE 'waiting' END,
         lock_token = CASE WHEN expired.over THEN job.lock_token END,
         locked_until_ms = CASE WHEN expired.over THEN job.locked_until_ms END,
         stalled_marked = false, stalled_count = job.stalled_count + 1,
         seq = CASE WHEN expired.over THEN job.seq ELSE nextval('job_seq') END
    FROM expired
   WHERE job.queue = $1 AND job.id = expired.id
  RETURNING job.id, expired.over
), announced AS (
  SELECT publish_event($1::text, 'stalled', jsonb_build_object('jobId', moved.id)) FROM moved
)
SELECT expired.id, expired.over,
       (SELECT count(*) FROM announced) AS events,
       CASE WHEN EXISTS (SELECT 1 FROM moved WHERE NOT moved.over) THEN
         pg_notify('bullmq_jobs', $1) END AS woken
  FROM expired;

-- name: ready_in
-- $1 queue -> 0 when a job can be taken now; ms until the next delayed job is due or a
-- limit's window ends; NULL when only a notification can make one ready (paused, empty);
-- -1 when the queue is at its global concurrency (a finishing job frees a slot: the
-- layout announces it on bullmq_events only).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), settings AS (
  SELECT max(value) FILTER (WHERE field = 'paused') = '1' AS paused,
         max(value) FILTER (WHERE field = 'max')::bigint AS max_jobs,
         max(value) FILTER (WHERE field = 'concurrency')::bigint AS concurrency
    FROM meta WHERE queue = $1
), window_ AS (
  SELECT points, expire_at_ms FROM rate_limit WHERE queue = $1
)
SELECT CASE
         WHEN settings.paused THEN NULL
         WHEN EXISTS (SELECT 1 FROM window_
                       WHERE expire_at_ms > clock.now
                         AND points >= COALESCE(settings.max_jobs, 9007199254740991))
           THEN (SELECT expire_at_ms FROM window_) - clock.now
         WHEN settings.concurrency IS NOT NULL
              AND (SELECT count(*) FROM job WHERE queue = $1 AND state = 'active')
                  >= settings.concurrency THEN -1
         WHEN EXISTS (SELECT 1 FROM job WHERE queue = $1 AND state = 'waiting') THEN 0
         ELSE GREATEST((SELECT min(process_at_ms) FROM job
                         WHERE queue = $1 AND state = 'delayed') - clock.now, 0)
       END
  FROM clock, settings;
