-- Reading queues: jobs, states, counts, logs. Plain SELECTs on the layout's tables.

-- name: now
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint;

-- name: job
-- $1 queue, $2 id -> the job's row.
SELECT * FROM job WHERE queue = $1 AND id = $2;

-- name: state
-- $1 queue, $2 id -> state and priority ("prioritized" is waiting with priority > 0).
SELECT state::text, priority FROM job WHERE queue = $1 AND id = $2;

-- name: in_state
-- $1 queue, $2 layout state, $3 which waiting jobs ('plain': priority 0, 'prioritized':
-- priority > 0, 'any'). Rows in the order BullMQ lists them ascending: waiting ones in
-- the order they will be taken, delayed by due time, finished ones by finish time.
SELECT * FROM job
 WHERE queue = $1 AND state = $2::text::job_state
   AND ($3 = 'any' OR ($3 = 'plain' AND priority = 0) OR ($3 = 'prioritized' AND priority > 0))
 ORDER BY CASE WHEN $2 IN ('completed', 'failed') THEN finished_at_ms
               WHEN $2 = 'delayed' THEN process_at_ms END,
          priority, seq, id;

-- name: counts
-- $1 queue -> jobs per layout state (waiting split by priority) and the paused flag.
SELECT count(*) FILTER (WHERE state = 'waiting' AND priority = 0) AS waiting,
       count(*) FILTER (WHERE state = 'waiting' AND priority > 0) AS prioritized,
       count(*) FILTER (WHERE state = 'active') AS active,
       count(*) FILTER (WHERE state = 'delayed') AS delayed,
       count(*) FILTER (WHERE state = 'completed') AS completed,
       count(*) FILTER (WHERE state = 'failed') AS failed,
       count(*) FILTER (WHERE state = 'waiting-children') AS waiting_children,
       EXISTS (SELECT 1 FROM meta
                WHERE queue = $1 AND field = 'paused' AND value = '1') AS paused
  FROM job WHERE queue = $1;

-- name: paused
-- $1 queue -> whether the queue is paused.
SELECT EXISTS (SELECT 1 FROM meta WHERE queue = $1 AND field = 'paused' AND value = '1');

-- name: logs
-- $1 queue, $2 job id -> the job's log rows, oldest first.
SELECT row FROM job_log WHERE queue = $1 AND job_id = $2 ORDER BY idx;

-- name: queues
-- Every queue of the schema that holds jobs, settings or events.
SELECT queue FROM job UNION SELECT queue FROM meta UNION SELECT queue FROM event
 ORDER BY 1;

-- name: counts_per_priority
-- $1 queue, $2 priorities -> waiting jobs per priority, in the order asked.
SELECT count(job.id)
  FROM unnest($2::integer[]) WITH ORDINALITY AS asked(priority, n)
  LEFT JOIN job ON job.queue = $1 AND job.state = 'waiting' AND job.priority = asked.priority
 GROUP BY asked.n
 ORDER BY asked.n;

-- name: metrics
-- $1 queue, $2 kind ('completed' | 'failed') -> the layout's metrics row (count, the
-- minute and count of the last stored point, stored points newest first) and the clock.
SELECT count, prev_ts, prev_count, data,
       (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
  FROM metrics WHERE queue = $1 AND kind = $2;
