-- psyq's own set-based statements for the hot transitions of plain jobs, each one round
-- trip with the server's clock (design record 0003, psyq's own statements: psyq's SQL
-- replaces a layout function only where a measurement shows the gain). They write the
-- rows, the events and the NOTIFYs the layout's functions write for the same jobs, under
-- the same advisory locks: a plain job (no parent, no children, no deduplication) takes
-- none in add_job, move_to_active or move_to_completed; the event stream's notify
-- coalescing (`bullmq:evnotify:<queue>`, tried) and chunked trimming
-- (`bullmq:evtrim:<queue>`, tried, when an event id crosses a multiple of 256, down to
-- `opts.maxLenEvents`, 10000 when unset) are the layout's publish_event rules.
-- Under the queue's `when-read` event policy with no reader (readers.sql), add and
-- settle_take write no event rows and no NOTIFY bullmq_events, but where a completion frees
-- a slot of the queue's global concurrency or of a group (workers wait for it on
-- bullmq_events); the rest is the same.
-- Anything else (custom ids, parents, deduplication, pause, limits, global concurrency,
-- due delayed jobs, failures, mixed retention) goes through the layout's functions.
-- Grouped jobs (groups.sql) enter their lines in `add` and leave their groups in
-- `settle_take` here, set-wise, without groups.sql's per-row triggers.

-- name: add
-- $1 queue, $2 names, $3 data (JSON text), $4 opts (JSON text), $5 priorities, $6 delays
-- ms, $7 timestamps (NULL: the server's clock), $8 attempts, $9 lifo flags, $10 the event
-- id up to which the caller's last trim of the queue's events deleted (NULL: not known, a
-- trim reads from the queue's first event): one job per position, ids from the queue's
-- own id sequence (raises undefined_table, 42P01, when the queue has none yet: the caller
-- then adds through the layout, which creates it).
-- -> (id, now, sent, trimmed, trimmed_to: the event id this statement trimmed up to, NULL
-- when it did not trim) per job, in input order. Events per job: added, then waiting |
-- delayed; NOTIFY bullmq_jobs and (coalesced) bullmq_events, as add_job. The events
-- follow the input order: |seq| grows with it (seq is negated for lifo).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), quiet AS (
  -- the queue's event policy is when-read (readers.sql) and no reader's lease is alive:
  -- no event rows, no NOTIFY bullmq_events (a one-time filter on the events' insert)
  SELECT EXISTS (SELECT 1 FROM meta
                  WHERE queue = $1 AND field = 'psyq.events' AND value = 'when-read')
         AND NOT EXISTS (SELECT 1 FROM psyq_event_reader
                          WHERE queue = $1 AND expires > clock.now) AS unread
    FROM clock
), grouped AS (
  -- jobs with a group (groups.sql): one that is not delayed goes straight into its group's
  -- line (a `delayed` row with no due time, as the trigger would put it); the groups' rows
  -- and maxSize, for the whole batch at once, before any row is written (psyq_group_admit)
  SELECT g.n, g.opts::jsonb -> 'group' AS spec, g.delay <= 0 AS enters
    FROM unnest($4::text[], $6::bigint[]) WITH ORDINALITY AS g(opts, delay, n)
   WHERE g.opts::jsonb ? 'group'
), admitted AS (
  SELECT psyq_group_admit(array_agg($1::text ORDER BY n),
                          array_agg(spec ->> 'id' ORDER BY n),
                          array_agg((spec ->> 'maxSize')::integer ORDER BY n),
                          array_agg(enters ORDER BY n)) AS ok
    FROM grouped
), given AS (
  SELECT g.*,
         nextval(job_id_seq_name($1::text)::regclass)::text AS id,
         nextval('job_seq') AS s,
         grouped.spec ->> 'id' AS grp,
         COALESCE((grouped.spec ->> 'priority')::integer, 0) AS grp_priority
    FROM admitted,
         unnest($2::text[], $3::text[], $4::text[], $5::integer[], $6::bigint[],
                $7::bigint[], $8::integer[], $9::boolean[])
         WITH ORDINALITY AS g(name, data, opts, priority, delay, ts, attempts, lifo, n)
    LEFT JOIN grouped ON grouped.n = g.n AND grouped.enters
   WHERE admitted.ok
), inserted AS (
  INSERT INTO job (queue, id, seq, name, state, data, opts, priority, delay_ms,
                   max_attempts, added_at_ms, process_at_ms, psyq_group, psyq_group_priority)
  SELECT $1, given.id, CASE WHEN given.lifo THEN -given.s ELSE given.s END, given.name,
         CASE WHEN given.delay > 0 OR given.grp IS NOT NULL THEN 'delayed'::job_state
              ELSE 'waiting'::job_state END,
         given.data::jsonb, given.opts::jsonb, given.priority, given.delay, given.attempts,
         COALESCE(given.ts, clock.now),
         CASE WHEN given.delay > 0 THEN COALESCE(given.ts, clock.now) + given.delay END,
         given.grp, CASE WHEN given.grp IS NOT NULL THEN given.grp_priority END
    FROM given, clock
  ON CONFLICT (queue, id) DO NOTHING
  RETURNING id, name, state, process_at_ms, abs(seq) AS o, psyq_group IS NOT NULL AS lined
), written AS (
  INSERT INTO event (queue, event, data, created_at_ms)
  SELECT $1, e.event, e.data, clock.now
    FROM clock,
         (SELECT i.o * 2 AS o, 'added' AS event,
                 jsonb_build_object('jobId', i.id, 'name', i.name) AS data
            FROM inserted i
          UNION ALL
          SELECT i.o * 2 + 1,
                 CASE WHEN i.state = 'delayed' AND NOT i.lined THEN 'delayed' ELSE 'waiting' END,
                 CASE WHEN i.state = 'delayed' AND NOT i.lined
                      THEN jsonb_build_object('jobId', i.id, 'delay', i.process_at_ms)
                      ELSE jsonb_build_object('jobId', i.id) END
            FROM inserted i) AS e
   WHERE NOT (SELECT unread FROM quiet)
   ORDER BY e.o
  RETURNING id
), bound AS (
  SELECT COALESCE((SELECT value::integer FROM meta
                    WHERE queue = $1 AND field = 'opts.maxLenEvents'), 10000) AS max_len,
         (SELECT max(id) FROM written) AS newest,
         EXISTS (SELECT 1 FROM written WHERE id % 256 = 0) AS crossed
), trim_to AS (
  SELECT newest - max_len AS upto FROM bound
   WHERE CASE WHEN crossed AND max_len > 0 AND newest > max_len
              THEN pg_try_advisory_xact_lock(hashtext('bullmq:evtrim:' || $1::text))
              ELSE false END
), trimmed AS (
  -- EXISTS is the same for every row: a one-time filter, so the event table is not read at
  -- all when there is nothing to trim (a per-row test would scan it on every statement).
  -- From $10 less 1024 (late commits) when the caller knows where its last trim ended: the
  -- ids below are gone, and their index entries, dead until a vacuum, are not read again.
  DELETE FROM event
   WHERE EXISTS (SELECT 1 FROM trim_to)
     AND queue = $1 AND id <= (SELECT upto FROM trim_to)
     AND id > COALESCE($10::bigint - 1024, -1)
  RETURNING 1
), woken AS (
  SELECT CASE WHEN EXISTS (SELECT 1 FROM inserted) THEN
           (SELECT count(*) FROM (SELECT pg_notify('bullmq_jobs', $1)) AS jobs)
           + CASE WHEN (SELECT unread FROM quiet) THEN 0
                  WHEN pg_try_advisory_xact_lock(hashtext('bullmq:evnotify:' || $1::text))
                  THEN (SELECT count(*) FROM (SELECT pg_notify('bullmq_events', $1)) AS ev)
                  ELSE 0 END
         END AS sent
)
SELECT given.id, clock.now, (SELECT sent FROM woken) AS sent,
       (SELECT count(*) FROM trimmed) AS trimmed, (SELECT upto FROM trim_to) AS trimmed_to
  FROM given, clock
 ORDER BY given.n;

-- name: settle_take
-- $1 queue, $2 ids, $3 tokens, $4 return values (JSON text), $9 the worker's
-- removeOnComplete per job (JSON text or NULL, for a job without its own): jobs
-- completed; then $5 tokens (one job per token), $6 lock ms, $7 worker name, $8 the worker
-- has a limiter: jobs taken, in one statement (one round trip, one commit); $10 as add's
-- (where the caller's last trim of the queue's events ended).
-- A completion is done here when the job is active under its token, has no parent, no
-- children and no deduplication key, and its removeOnComplete is the batch's (absent,
-- false, true, a count above the batch's size, or {age > 0, count}); the rest come back
-- as psyq_left rows for the layout's move_to_completed. Retention runs once for the
-- batch: what the layout's apply_retention leaves after the same completions.
-- The take is done here when every completion was (else it takes nothing: the caller
-- settles the rest through the layout, then takes) and no pause, global concurrency, rate limit (meta or worker)
-- or due delayed job is in the way; else the status row says psyq_fallback and the caller
-- takes through the layout's move_to_active.
-- -> the taken jobs (job columns, psyq_slot = token position), one psyq_left row per
-- completion not done, and one status row (psyq_slot and psyq_left NULL): psyq_fallback,
-- psyq_counted (the psyq_finished row id of the batch's count, see transitions.count),
-- psyq_idle and psyq_next_ms: when the take ran, whether no other job was left waiting
-- at all (locked ones included) and the ms until the queue's next
-- delayed job is due (NULL: none): what transitions.ready_in would say, read in the take's
-- snapshot, so a caller that listened before sending it need not ask again; and
-- psyq_trimmed_to, the event id this statement trimmed the queue's events up to (NULL:
-- it did not trim).
-- Events: completed per job, drained (the queue ran dry), active per job taken.
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), quiet AS (
  -- the queue's event policy is when-read (readers.sql) and no reader's lease is alive:
  -- no event rows, no NOTIFY bullmq_events (a one-time filter on the events' insert)
  SELECT EXISTS (SELECT 1 FROM meta
                  WHERE queue = $1 AND field = 'psyq.events' AND value = 'when-read')
         AND NOT EXISTS (SELECT 1 FROM psyq_event_reader
                          WHERE queue = $1 AND expires > clock.now) AS unread
    FROM clock
), item AS (
  SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $9::text[]) WITH ORDINALITY
                AS item(id, token, value, worker_keep, n)
), seen AS (
  SELECT item.*,
         COALESCE(job.opts -> 'removeOnComplete', item.worker_keep::jsonb, 'false'::jsonb)
           AS keep,
         job.state = 'active' AND job.lock_token = item.token
           AND job.parent_id IS NULL AND job.dedup_id IS NULL AND job.pending_deps = 0
           AND NOT EXISTS (SELECT 1 FROM job_dependency d
                            WHERE d.parent_queue = $1 AND d.parent_id = item.id)
           AS plain,
         job.psyq_group AS grp
    -- each job by its primary key: a LATERAL with LIMIT is not flattened into a join, which
    -- a planner without statistics (a table never analysed) makes a scan of the queue's jobs
    FROM item LEFT JOIN LATERAL (SELECT * FROM job
                                  WHERE job.queue = $1 AND job.id = item.id LIMIT 1) AS job
           ON true
), spec AS (
  SELECT keep,
         keep = 'true'::jsonb AS remove,
         CASE jsonb_typeof(keep) WHEN 'object' THEN (keep ->> 'age')::bigint END AS age,
         CASE jsonb_typeof(keep) WHEN 'number' THEN (keep #>> '{}')::integer
                                 WHEN 'object' THEN (keep ->> 'count')::integer END AS keep_count
    FROM seen WHERE plain ORDER BY n LIMIT 1
), chosen AS (
  SELECT seen.* FROM seen, spec
   WHERE seen.plain AND seen.keep = spec.keep
     AND (spec.age IS NULL OR spec.age > 0)
     AND (spec.keep_count IS NULL OR spec.keep_count < 0
          OR spec.keep_count > (SELECT count(*) FROM seen))
), completed AS (
  -- Each job is found by its primary key. `state::text` keeps the planner off the
  -- queue's active-jobs index (which `state = 'active'` would let it scan, testing every
  -- active job against every completion: 7,450 pairs a statement with 150 jobs active);
  -- spec.remove, a one-time filter, runs only one of completed and removed.
  -- A grouped job leaves its group here (psyq_group cleared, so groups.sql's trigger
  -- does not run for it): `vacated` tidies its group's row.
  UPDATE job
     SET state = 'completed', return_value = chosen.value::jsonb,
         finished_at_ms = clock.now, lock_token = NULL, locked_until_ms = NULL,
         attempts_made = job.attempts_made + 1, psyq_group = NULL
    FROM chosen, clock
   WHERE NOT (SELECT remove FROM spec)
     AND job.queue = $1 AND job.id = chosen.id
     AND job.state::text = 'active' AND job.lock_token = chosen.token
  RETURNING job.id, chosen.n, chosen.value, chosen.grp
), vacant AS (
  -- the groups these completions left with no job waiting or active (those completed here
  -- still look active in the statement's snapshot) and nothing of their own to keep
  -- (groups.sql psyq_group_tidy's rule), as read in the snapshot with their rows' xmin
  SELECT g.group_id, g.xmin AS seen FROM psyq_group g, clock
   WHERE g.queue = $1
     AND g.group_id IN (SELECT grp FROM completed WHERE grp IS NOT NULL)
     AND g.concurrency IS NULL AND g.limit_max IS NULL AND NOT g.paused
     AND g.window_end <= clock.now AND g.parked_until <= clock.now
     -- the groups with a line, asked once for all (groups.sql psyq_group_lined)
     AND g.group_id NOT IN (
           SELECT psyq_group_lined($1, ARRAY(SELECT grp FROM completed WHERE grp IS NOT NULL)))
     -- the groups with other jobs active, read once for all (NOT IN: a hashed subplan; a
     -- test per group a planner without statistics runs over every active job each time)
     AND g.group_id NOT IN (
           SELECT job.psyq_group FROM job
            WHERE job.queue = $1 AND job.state = 'active' AND job.psyq_group IS NOT NULL
              AND job.id NOT IN (SELECT id FROM completed))
), vacated AS (
  -- their rows go unless changed since the snapshot: whatever puts a job in a group's
  -- line (an add, the trigger for a job back in it) writes a new version of its row,
  -- another xmin, which the delete sees when it rechecks the row
  DELETE FROM psyq_group g USING vacant
   WHERE g.queue = $1 AND g.group_id = vacant.group_id AND g.xmin = vacant.seen
  RETURNING 1
), removed AS (
  DELETE FROM job USING chosen
   WHERE (SELECT remove FROM spec)
     AND job.queue = $1 AND job.id = chosen.id
     AND job.state::text = 'active' AND job.lock_token = chosen.token
  RETURNING job.id, chosen.n, chosen.value
), settled AS (
  SELECT id, n, value FROM completed UNION ALL SELECT * FROM removed
), cutoff AS (
  SELECT job.finished_at_ms, job.seq FROM job
   WHERE job.queue = $1 AND job.state = 'completed'
     AND (SELECT keep_count FROM spec WHERE NOT remove) >= 0
   ORDER BY job.finished_at_ms DESC, job.seq DESC
  OFFSET GREATEST((SELECT keep_count FROM spec) - (SELECT count(*) FROM chosen), 0)
   LIMIT 1
), edge AS (
  SELECT clock.now - spec.age * 1000 AS aged,
         GREATEST((SELECT finished_at_ms FROM cutoff), clock.now - spec.age * 1000) AS bound
    FROM spec, clock
   WHERE NOT spec.remove
), retired AS (
  DELETE FROM job
   WHERE job.queue = $1 AND job.state = 'completed'
     AND job.finished_at_ms <= (SELECT bound FROM edge)
     AND ((job.finished_at_ms, job.seq) <= (SELECT finished_at_ms, seq FROM cutoff)
          OR job.finished_at_ms <= (SELECT aged FROM edge))
  RETURNING 1
), settings AS (
  SELECT EXISTS (SELECT 1 FROM meta
                  WHERE queue = $1 AND field = 'paused' AND value = '1') AS paused,
         EXISTS (SELECT 1 FROM meta
                  WHERE queue = $1 AND field IN ('concurrency', 'max')) AS limited
), gate AS (
  SELECT cardinality($5::text[]) > 0
           AND (SELECT count(*) FROM settled) = (SELECT count(*) FROM item) AS wanted,
         NOT (settings.paused OR settings.limited OR $8::boolean
              OR EXISTS (SELECT 1 FROM rate_limit
                          WHERE queue = $1 AND expire_at_ms > clock.now)
              OR EXISTS (SELECT 1 FROM job
                          WHERE queue = $1 AND state = 'delayed'
                            AND process_at_ms <= clock.now)) AS open
    FROM settings, clock
), picked AS (
  SELECT job.id, job.priority, job.seq FROM job
   WHERE job.queue = $1 AND job.state = 'waiting'
     AND (SELECT gate.wanted AND gate.open FROM gate)
   ORDER BY job.priority, job.seq
   LIMIT cardinality($5::text[])
     FOR UPDATE OF job SKIP LOCKED
), slot AS (
  SELECT id, row_number() OVER (ORDER BY priority, seq) AS n FROM picked
), taken AS (
  UPDATE job
     SET state = 'active', lock_token = ($5::text[])[slot.n],
         locked_until_ms = clock.now + $6::bigint, processed_at_ms = clock.now,
         processed_by = $7::text, attempts_started = job.attempts_started + 1
    FROM slot, clock
   WHERE job.queue = $1 AND job.id = slot.id
  RETURNING job.*, slot.n AS psyq_slot
), drained AS (
  SELECT 1 FROM settings
   WHERE EXISTS (SELECT 1 FROM settled) AND NOT EXISTS (SELECT 1 FROM taken)
     AND NOT EXISTS (SELECT 1 FROM job
                      WHERE queue = $1 AND state = 'active'
                        AND id NOT IN (SELECT id FROM settled))
     AND (settings.paused
          OR NOT EXISTS (SELECT 1 FROM job WHERE queue = $1 AND state = 'waiting'))
), written AS (
  INSERT INTO event (queue, event, data, created_at_ms)
  SELECT $1, e.event, e.data, clock.now
    FROM clock,
         (SELECT 1 AS part, settled.n AS o, 'completed' AS event,
                 jsonb_build_object('jobId', settled.id,
                                    'returnvalue',
                                    COALESCE(settled.value::jsonb, 'null'::jsonb)::text,
                                    'prev', 'active') AS data
            FROM settled
          UNION ALL
          SELECT 2, 0, 'drained', '{}'::jsonb FROM drained
          UNION ALL
          SELECT 3, taken.psyq_slot, 'active',
                 jsonb_build_object('jobId', taken.id, 'prev', 'waiting')
            FROM taken) AS e
   WHERE NOT (SELECT unread FROM quiet)
   ORDER BY e.part, e.o
  RETURNING id
), counted AS (
  INSERT INTO psyq_finished (queue, kind, at_ms, jobs)
  SELECT $1, 'completed', clock.now, count(*) FROM settled, clock
   GROUP BY clock.now
  RETURNING id
), bound AS (
  SELECT COALESCE((SELECT value::integer FROM meta
                    WHERE queue = $1 AND field = 'opts.maxLenEvents'), 10000) AS max_len,
         (SELECT max(id) FROM written) AS newest,
         EXISTS (SELECT 1 FROM written WHERE id % 256 = 0) AS crossed
), trim_to AS (
  SELECT newest - max_len AS upto FROM bound
   WHERE CASE WHEN crossed AND max_len > 0 AND newest > max_len
              THEN pg_try_advisory_xact_lock(hashtext('bullmq:evtrim:' || $1::text))
              ELSE false END
), trimmed AS (
  -- EXISTS is the same for every row: a one-time filter, so the event table is not read at
  -- all when there is nothing to trim (a per-row test would scan it on every statement).
  -- From $10 less 1024 (late commits) when the caller knows where its last trim ended: the
  -- ids below are gone, and their index entries, dead until a vacuum, are not read again.
  DELETE FROM event
   WHERE EXISTS (SELECT 1 FROM trim_to)
     AND queue = $1 AND id <= (SELECT upto FROM trim_to)
     AND id > COALESCE($10::bigint - 1024, -1)
  RETURNING 1
), woken AS (
  -- bullmq_events is also how a worker held by the queue's global concurrency, or by a
  -- group's, learns that a slot came free (transitions.ready_in -1): under when-read with
  -- no reader, completions that free such a slot still send it, with no event row
  SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM written)
                   AND NOT (EXISTS (SELECT 1 FROM settled)
                            AND (EXISTS (SELECT 1 FROM meta
                                          WHERE queue = $1 AND field = 'concurrency')
                                 OR EXISTS (SELECT 1 FROM seen WHERE grp IS NOT NULL)))
              THEN 0
              WHEN pg_try_advisory_xact_lock(hashtext('bullmq:evnotify:' || $1::text))
              THEN (SELECT count(*) FROM (SELECT pg_notify('bullmq_events', $1)) AS ev)
              ELSE 0 END AS sent
), short AS (
  -- read for every take that ran, a full one too (a worker with one slot takes one job:
  -- whether another waits decides whether its next take need ask); the rows it took
  -- still look waiting in the statement's snapshot, hence NOT IN
  SELECT NOT EXISTS (SELECT 1 FROM job
                      WHERE queue = $1 AND state = 'waiting'
                        AND id NOT IN (SELECT id FROM picked)) AS idle,
         (SELECT min(process_at_ms) FROM job
           WHERE queue = $1 AND state = 'delayed') - clock.now AS next_ms
    FROM gate, clock
   WHERE gate.wanted AND gate.open
)
SELECT taken.*, NULL::text AS psyq_left, NULL::boolean AS psyq_fallback,
       NULL::bigint AS psyq_counted, NULL::boolean AS psyq_idle, NULL::bigint AS psyq_next_ms,
       NULL::bigint AS psyq_trimmed_to
  FROM taken
UNION ALL
SELECT (NULL::job).*, NULL::bigint, item.id, NULL, NULL, NULL, NULL, NULL
  FROM item WHERE item.id NOT IN (SELECT id FROM settled)
UNION ALL
SELECT (NULL::job).*, NULL::bigint, NULL, gate.wanted AND NOT gate.open,
       (SELECT id FROM counted), (SELECT idle FROM short), (SELECT next_ms FROM short),
       (SELECT upto FROM trim_to)
  FROM gate
 WHERE (SELECT sent FROM woken) IS NOT NULL
   AND (SELECT count(*) FROM trimmed) >= 0
   AND (SELECT count(*) FROM retired) >= 0;
