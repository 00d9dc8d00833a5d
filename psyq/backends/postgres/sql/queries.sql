-- Reading queues: jobs, states, counts, logs. Plain SELECTs on the layout's tables.

-- name: now
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint;

-- name: job
-- $1 queue, $2 id -> the job's row.
SELECT * FROM job WHERE queue = $1 AND id = $2;

-- name: state
-- $1 queue, $2 id -> state and priority ("prioritized" is waiting with priority > 0; a
-- job in its group's line, sql/groups.sql, is waiting).
SELECT CASE WHEN state = 'delayed' AND process_at_ms IS NULL AND psyq_group IS NOT NULL
            THEN 'waiting' ELSE state::text END AS state, priority
  FROM job WHERE queue = $1 AND id = $2;

-- in_<order>_<direction>:
-- A page of one state's jobs: $1 queue, $2 the layout state (or, for `ready`, which
-- waiting jobs), $3 offset, $4 most rows. `_asc` lists them in BullMQ's ascending order,
-- `_desc` the other way; each order is one the layout's indexes serve.

-- name: in_finished_asc
-- completed and failed jobs, by finish time.
SELECT * FROM job
 WHERE queue = $1 AND state = $2::text::job_state AND state IN ('completed', 'failed')
 ORDER BY finished_at_ms ASC, seq ASC, id ASC
OFFSET $3 LIMIT $4;

-- name: in_finished_desc
-- completed and failed jobs, by finish time.
SELECT * FROM job
 WHERE queue = $1 AND state = $2::text::job_state AND state IN ('completed', 'failed')
 ORDER BY finished_at_ms DESC, seq DESC, id DESC
OFFSET $3 LIMIT $4;

-- name: in_delayed_asc
-- delayed jobs, by due time.
SELECT * FROM job
 WHERE queue = $1 AND state = 'delayed' AND $2::text = 'delayed'
   AND NOT (process_at_ms IS NULL AND psyq_group IS NOT NULL)
 ORDER BY process_at_ms ASC, seq ASC, id ASC
OFFSET $3 LIMIT $4;

-- name: in_delayed_desc
-- delayed jobs, by due time.
SELECT * FROM job
 WHERE queue = $1 AND state = 'delayed' AND $2::text = 'delayed'
   AND NOT (process_at_ms IS NULL AND psyq_group IS NOT NULL)
 ORDER BY process_at_ms DESC, seq DESC, id DESC
OFFSET $3 LIMIT $4;

-- name: in_ready_asc
-- waiting jobs ('plain': priority 0, 'prioritized': above, 'any'), in the order they will be taken;
-- grouped ones (sql/groups.sql) after the others, group by group.
SELECT * FROM job
 WHERE queue = $1
   AND ((state = 'waiting' AND ($2 = 'any' OR ($2 = 'plain') = (priority = 0)))
        OR ($2 <> 'prioritized' AND state = 'delayed' AND process_at_ms IS NULL
            AND psyq_group IS NOT NULL))
 ORDER BY state = 'delayed' ASC, priority ASC, psyq_group ASC, psyq_group_priority ASC,
          seq ASC, id ASC
OFFSET $3 LIMIT $4;

-- name: in_ready_desc
-- waiting jobs ('plain': priority 0, 'prioritized': above, 'any'), in the order they will be taken;
-- grouped ones (sql/groups.sql) after the others, group by group.
SELECT * FROM job
 WHERE queue = $1
   AND ((state = 'waiting' AND ($2 = 'any' OR ($2 = 'plain') = (priority = 0)))
        OR ($2 <> 'prioritized' AND state = 'delayed' AND process_at_ms IS NULL
            AND psyq_group IS NOT NULL))
 ORDER BY state = 'delayed' DESC, priority DESC, psyq_group DESC, psyq_group_priority DESC,
          seq DESC, id DESC
OFFSET $3 LIMIT $4;

-- name: in_other_asc
-- active and waiting-children jobs, by sequence.
SELECT * FROM job
 WHERE queue = $1 AND state = $2::text::job_state
   AND state IN ('active', 'waiting-children')
 ORDER BY seq ASC, id ASC
OFFSET $3 LIMIT $4;

-- name: in_other_desc
-- active and waiting-children jobs, by sequence.
SELECT * FROM job
 WHERE queue = $1 AND state = $2::text::job_state
   AND state IN ('active', 'waiting-children')
 ORDER BY seq DESC, id DESC
OFFSET $3 LIMIT $4;

-- name: counts
-- $1 queue -> jobs per layout state (waiting split by priority; jobs in their group's line
-- are waiting) and the paused flag.
SELECT count(*) FILTER (WHERE (state = 'waiting' AND priority = 0)
                          OR (state = 'delayed' AND process_at_ms IS NULL
                              AND psyq_group IS NOT NULL)) AS waiting,
       count(*) FILTER (WHERE state = 'waiting' AND priority > 0) AS prioritized,
       count(*) FILTER (WHERE state = 'active') AS active,
       count(*) FILTER (WHERE state = 'delayed'
                          AND NOT (process_at_ms IS NULL AND psyq_group IS NOT NULL))
         AS delayed,
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
