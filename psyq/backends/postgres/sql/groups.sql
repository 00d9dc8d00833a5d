-- Groups (BullMQ Pro's `group: {id}`): psyq's own objects beside the layout's (design
-- record 0015; docs/backends.md, PostgreSQL, "Groups"). A grouped job waiting in its group's line is a `job` row in state
-- 'delayed' with no due time (process_at_ms NULL) and its group in psyq_group: no take of
-- the layout (Node BullMQ's move_to_active, psyq's fast take) and no promotion of due
-- delayed jobs ever reads it; psyq reports it as "waiting". A trigger puts every grouped
-- job that becomes 'waiting' (added, promoted, retried, stalled, handed back; whoever
-- wrote it) into its line; psyq_group holds each group's turn in the rotation, its own
-- settings and its rate window, and goes once the group has no job and no setting.

-- name: installed
-- $1 the fingerprint of `create` -> whether the schema has psyq's group objects as
-- `create` makes them (its fingerprint is the take function's comment: see `mark`).
SELECT COALESCE(obj_description(
         to_regprocedure('psyq_group_take(text,text[],bigint,text,integer,integer,bigint,integer,bigint)'),
         'pg_proc') = $1::text, false);

-- name: mark_statement
-- $1 the fingerprint of `create` -> the statement that records it.
SELECT format('COMMENT ON FUNCTION '
              'psyq_group_take(text,text[],bigint,text,integer,integer,bigint,integer,bigint) IS %L',
              $1::text);

-- name: create
-- Run under the schema's advisory lock, when `installed` says no.
ALTER TABLE job ADD COLUMN IF NOT EXISTS psyq_group text,
                ADD COLUMN IF NOT EXISTS psyq_group_priority integer;
CREATE INDEX IF NOT EXISTS psyq_group_line_idx
  ON job (queue, psyq_group, psyq_group_priority, seq)
  WHERE state = 'delayed' AND process_at_ms IS NULL AND psyq_group IS NOT NULL;
CREATE INDEX IF NOT EXISTS psyq_group_active_idx
  ON job (queue, psyq_group)
  WHERE state = 'active' AND psyq_group IS NOT NULL;
CREATE SEQUENCE IF NOT EXISTS psyq_group_turn;
DROP FUNCTION IF EXISTS psyq_group_take(text, text[], bigint, text, integer, integer, bigint);
CREATE TABLE IF NOT EXISTS psyq_group (
  queue          text    NOT NULL,
  group_id       text    NOT NULL,
  turn           bigint  NOT NULL,            -- the rotation: the lowest is served next
  concurrency    integer,                     -- own settings (NULL: the worker's)
  limit_max      integer,
  limit_duration bigint,
  paused         boolean NOT NULL DEFAULT false,
  points         integer NOT NULL DEFAULT 0,  -- jobs started in the window ending at
  window_end     bigint  NOT NULL DEFAULT 0,
  parked_until   bigint  NOT NULL DEFAULT 0,  -- rate_limit_group
  PRIMARY KEY (queue, group_id)
);
CREATE INDEX IF NOT EXISTS psyq_group_turn_idx ON psyq_group (queue, turn);

-- psyq_group_lined: those of p_groups that have a job in their line, asked once for a
-- statement's groups (fast.sql settle_take). Each line is read along its index
-- (psyq_group_line_idx), in its order: on tables never analysed (autovacuum off, or not
-- yet run) the planner takes every index for equally selective and may read the layout's
-- delayed-jobs index instead, which holds every line's jobs, testing each one's group
-- (10,000 groups: 17 s a take), so this runs in PL/pgSQL with enable_sort off, which a
-- statement cannot set (jit off: see psyq_group_take). STABLE: the caller's snapshot.
CREATE OR REPLACE FUNCTION psyq_group_lined(p_queue text, p_groups text[])
RETURNS SETOF text
LANGUAGE plpgsql STABLE SET search_path FROM CURRENT SET enable_sort = off SET jit = off AS $$
BEGIN
  RETURN QUERY
  SELECT given.id FROM unnest(p_groups) AS given(id)
   WHERE (SELECT true FROM job
           WHERE job.queue = p_queue AND job.psyq_group = given.id
             AND job.state = 'delayed' AND job.process_at_ms IS NULL
           ORDER BY job.psyq_group_priority, job.seq
           LIMIT 1);
END;
$$;

-- psyq_group_has_line: whether one group has a job in its line (psyq_group_lined).
CREATE OR REPLACE FUNCTION psyq_group_has_line(p_queue text, p_group text) RETURNS boolean
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
  SELECT EXISTS (SELECT 1 FROM psyq_group_lined(p_queue, ARRAY[p_group]));
$$;

CREATE OR REPLACE FUNCTION psyq_group_busy(p_queue text, p_group text) RETURNS boolean
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
  SELECT psyq_group_has_line(p_queue, p_group)
      OR EXISTS (SELECT 1 FROM job
                  WHERE queue = p_queue AND psyq_group = p_group AND state = 'active');
$$;

-- psyq_group_turns: up to p_limit groups of the queue that have a line and are neither
-- paused nor parked, in the rotation's order. Read along psyq_group_turn_idx, stopping at
-- the limit: a bitmap scan and a sort (what the planner picks on a table never analysed)
-- would ask every group of the queue whether it has a line.
CREATE OR REPLACE FUNCTION psyq_group_turns(p_queue text, p_now bigint, p_limit integer)
RETURNS SETOF psyq_group
LANGUAGE plpgsql STABLE SET search_path FROM CURRENT SET enable_sort = off
  SET enable_bitmapscan = off SET jit = off AS $$
BEGIN
  -- PL/pgSQL, not SQL: its plan is kept for the session, not made again per call
  RETURN QUERY
  SELECT g.* FROM psyq_group g
   WHERE g.queue = p_queue AND NOT g.paused AND g.parked_until <= p_now
     -- psyq_group_lined's test, written out: a function call per group costs ~0.1 ms
     AND (SELECT true FROM job
           WHERE job.queue = p_queue AND job.psyq_group = g.group_id
             AND job.state = 'delayed' AND job.process_at_ms IS NULL
           ORDER BY job.psyq_group_priority, job.seq
           LIMIT 1)
   ORDER BY g.turn
   LIMIT p_limit;
END;
$$;

CREATE OR REPLACE FUNCTION psyq_group_tidy(p_queue text, p_group text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_now bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
BEGIN
  IF psyq_group_busy(p_queue, p_group) THEN
    RETURN;
  END IF;
  -- an add into the group holds the row until it commits; asked again after the lock
  -- (a new snapshot), its job is seen
  PERFORM 1 FROM psyq_group WHERE queue = p_queue AND group_id = p_group FOR UPDATE;
  IF NOT psyq_group_busy(p_queue, p_group) THEN
    DELETE FROM psyq_group
     WHERE queue = p_queue AND group_id = p_group AND concurrency IS NULL
       AND limit_max IS NULL AND NOT paused AND window_end <= v_now
       AND parked_until <= v_now;
  END IF;
END;
$$;

CREATE OR REPLACE FUNCTION psyq_group_enter() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF current_setting('psyq.group_lines', true) = 'off' THEN
    RETURN NEW;  -- `expose`: the lines lent to a layout call as waiting jobs
  END IF;
  NEW.psyq_group := NEW.opts -> 'group' ->> 'id';
  NEW.psyq_group_priority := COALESCE((NEW.opts -> 'group' ->> 'priority')::integer, 0);
  NEW.state := 'delayed';
  NEW.process_at_ms := NULL;
  NEW.delay_ms := 0;
  IF TG_OP = 'UPDATE' AND OLD.state = 'active' THEN
    -- a retry goes to the end of its group's line; a stall or a hand-back to its head
    NEW.seq := CASE WHEN NEW.attempts_made > OLD.attempts_made
                    THEN nextval('job_seq') ELSE OLD.seq END;
  END IF;
  -- a new version of the row (not a lock only): a tidy that read the group empty before
  -- this commits sees another xmin and leaves the row (fast.sql settle_take)
  INSERT INTO psyq_group (queue, group_id, turn)
  VALUES (NEW.queue, NEW.psyq_group, nextval('psyq_group_turn'))
  ON CONFLICT (queue, group_id) DO UPDATE SET turn = psyq_group.turn;
  RETURN NEW;
END;
$$;

CREATE OR REPLACE FUNCTION psyq_group_leave() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM psyq_group_tidy(OLD.queue, OLD.psyq_group);
  RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS psyq_group_enter ON job;
CREATE TRIGGER psyq_group_enter BEFORE INSERT OR UPDATE OF state ON job
  FOR EACH ROW WHEN (NEW.state = 'waiting' AND NEW.opts ? 'group')
  EXECUTE FUNCTION psyq_group_enter();
DROP TRIGGER IF EXISTS psyq_group_left ON job;
-- psyq's completions (fast.sql settle_take) clear psyq_group and tidy the groups set-wise,
-- so the trigger runs for the layout's own moves (Node's, failures, retries, admin)
CREATE TRIGGER psyq_group_left AFTER UPDATE OF state ON job
  FOR EACH ROW WHEN (OLD.psyq_group IS NOT NULL AND NEW.psyq_group IS NOT NULL
                     AND OLD.state <> NEW.state
                     AND (OLD.state = 'active' OR NEW.state <> 'active'))
  EXECUTE FUNCTION psyq_group_leave();
DROP TRIGGER IF EXISTS psyq_group_removed ON job;
CREATE TRIGGER psyq_group_removed AFTER DELETE ON job
  FOR EACH ROW WHEN (OLD.psyq_group IS NOT NULL)
  EXECUTE FUNCTION psyq_group_leave();

-- psyq_group_ready: whether a group (its row locked, read fresh) can start a job now.
CREATE OR REPLACE FUNCTION psyq_group_ready(
  g psyq_group, p_now bigint, p_concurrency integer, p_max integer
) RETURNS boolean
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
  SELECT NOT g.paused AND g.parked_until <= p_now
     AND (g.window_end <= p_now OR COALESCE(g.limit_max, p_max) IS NULL
          OR g.points < COALESCE(g.limit_max, p_max))
     AND (COALESCE(g.concurrency, p_concurrency) IS NULL
          OR (SELECT count(*) FROM job
               WHERE queue = g.queue AND psyq_group = g.group_id AND state = 'active')
             < COALESCE(g.concurrency, p_concurrency));
$$;

-- psyq_group_queue_room: how many jobs the queue's own limits let start now (NULL: no
-- bound): none while it is paused or held by hand (rate_limit at the layout's "full"
-- mark), the room below its global concurrency, and none while its rate limit (meta
-- `max`, else the worker's p_max) is spent. Takes the layout's per-queue locks for the
-- limits that apply, as move_to_active does, so takes of every client count alike.
CREATE OR REPLACE FUNCTION psyq_group_queue_room(
  p_queue text, p_now bigint, p_max integer
) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_concurrency integer;
  v_room        integer;
BEGIN
  IF EXISTS (SELECT 1 FROM meta WHERE queue = p_queue AND field = 'paused' AND value = '1')
     OR EXISTS (SELECT 1 FROM rate_limit WHERE queue = p_queue AND expire_at_ms > p_now
                                           AND points >= 9007199254740991) THEN
    RETURN 0;
  END IF;
  SELECT value::integer INTO v_concurrency
    FROM meta WHERE queue = p_queue AND field = 'concurrency';
  IF v_concurrency IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtext('bullmq:concurrency:' || p_queue));
    v_room := GREATEST(v_concurrency - (SELECT count(*) FROM job
                                         WHERE queue = p_queue AND state = 'active'), 0);
  END IF;
  IF COALESCE((SELECT value::integer FROM meta WHERE queue = p_queue AND field = 'max'),
              p_max) IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtext('bullmq:limiter:' || p_queue));
    IF rate_limit_effective(p_queue, p_max, p_now) > 0 THEN
      RETURN 0;
    END IF;
  END IF;
  RETURN v_room;
END;
$$;

-- psyq_group_next: the ready group with the lowest turn, its row locked (NULL: none). A
-- group found not ready (full, or its window spent) goes to the end of the rotation, so
-- the next take does not look at it first again.
CREATE OR REPLACE FUNCTION psyq_group_next(
  p_queue text, p_now bigint, p_concurrency integer, p_max integer, p_skip text[]
) RETURNS psyq_group
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_group psyq_group;
  v_skip  text[] := p_skip;
BEGIN
  LOOP
    SELECT g.* INTO v_group FROM psyq_group g
     WHERE g.queue = p_queue AND g.group_id <> ALL (v_skip)
       AND NOT g.paused AND g.parked_until <= p_now
       AND psyq_group_has_line(p_queue, g.group_id)
     ORDER BY g.turn
     LIMIT 1
       FOR UPDATE OF g SKIP LOCKED;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
    IF psyq_group_ready(v_group, p_now, p_concurrency, p_max) THEN
      RETURN v_group;
    END IF;
    UPDATE psyq_group SET turn = nextval('psyq_group_turn')
     WHERE queue = p_queue AND group_id = v_group.group_id;
    v_skip := v_skip || v_group.group_id;
  END LOOP;
END;
$$;

-- psyq_group_take_each: psyq_group_take token by token, for a queue with a rate limit of
-- its own (meta `max`, or the worker's queue limiter p_qmax per p_qduration ms), whose
-- points the layout's functions count one job at a time.
CREATE OR REPLACE FUNCTION psyq_group_take_each(
  p_queue text, p_tokens text[], p_lock_ms bigint, p_name text,
  p_concurrency integer, p_max integer, p_duration bigint,
  p_qmax integer, p_qduration bigint
) RETURNS SETOF job
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_now    bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
  v_room   integer := psyq_group_queue_room(p_queue, v_now, p_qmax);
  v_qmax   integer := COALESCE((SELECT value::integer FROM meta
                                 WHERE queue = p_queue AND field = 'max'), p_qmax);
  v_qdur   bigint := COALESCE(p_qduration, (SELECT value::bigint FROM meta
                                             WHERE queue = p_queue AND field = 'duration'));
  v_token  text;
  v_group  psyq_group;
  v_skip   text[] := '{}';
  v_id     text;
  v_job    job;
  v_max    integer;
  v_opened text[] := '{}';
BEGIN
  FOREACH v_token IN ARRAY p_tokens LOOP
    EXIT WHEN v_room IS NOT NULL AND v_room <= 0;
    EXIT WHEN v_qmax IS NOT NULL AND rate_limit_effective(p_queue, p_qmax, v_now) > 0;
    v_id := NULL;
    LOOP
      v_group := psyq_group_next(p_queue, v_now, p_concurrency, p_max, v_skip);
      EXIT WHEN v_group.group_id IS NULL;
      SELECT job.id INTO v_id FROM job
       WHERE job.queue = p_queue AND job.psyq_group = v_group.group_id
         AND job.state = 'delayed' AND job.process_at_ms IS NULL
       ORDER BY job.psyq_group_priority, job.seq
       LIMIT 1
         FOR UPDATE SKIP LOCKED;
      EXIT WHEN v_id IS NOT NULL;
      v_skip := v_skip || v_group.group_id;
    END LOOP;
    EXIT WHEN v_id IS NULL;
    v_room := v_room - 1;
    IF v_qmax IS NOT NULL AND v_qdur IS NOT NULL THEN
      PERFORM rate_limit_consume(p_queue, v_qdur, v_now);
    END IF;
    v_max := COALESCE(v_group.limit_max, p_max);
    UPDATE psyq_group
       SET turn = nextval('psyq_group_turn'),
           points = CASE WHEN v_max IS NULL THEN points
                         WHEN window_end <= v_now THEN 1 ELSE points + 1 END,
           window_end = CASE WHEN v_max IS NULL THEN window_end
                             WHEN window_end <= v_now
                             THEN v_now + COALESCE(limit_duration, p_duration, 0)
                             ELSE window_end END
     WHERE queue = p_queue AND group_id = v_group.group_id;
    IF v_max IS NOT NULL AND v_group.window_end <= v_now THEN
      v_opened := v_opened || v_group.group_id;
    END IF;
    UPDATE job
       SET state = 'active', lock_token = v_token, locked_until_ms = v_now + p_lock_ms,
           processed_at_ms = v_now, processed_by = p_name,
           attempts_started = attempts_started + 1
     WHERE queue = p_queue AND id = v_id
    RETURNING * INTO v_job;
    PERFORM publish_event(p_queue, 'active',
      jsonb_build_object('jobId', v_id, 'prev', 'waiting'));
    RETURN NEXT v_job;
  END LOOP;
  -- a window opened here starts when the statement ends, as its jobs are handed out, and
  -- 10 ms later: the reply's way to the worker (a later take's reply may arrive sooner,
  -- and its jobs would start less than a window after these)
  UPDATE psyq_group
     SET window_end = (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 10
                      + COALESCE(limit_duration, p_duration, 0)
   WHERE queue = p_queue AND group_id = ANY (v_opened);
END;
$$;

-- psyq_group_take: one job per token from the groups, round robin, for all the tokens at
-- once (two statements, not a loop per token): the groups with the lowest turns that have
-- a line (their rows locked; those another take holds are skipped), then the ready ones
-- give their first jobs (lowest group priority, then FIFO), one each a
-- round, as many rounds as the tokens and each group's room allow (its concurrency less
-- its active jobs, the points left in its rate window), and go to the end of the rotation
-- in the order of their last job; a group found not ready (full, or its window spent)
-- goes to the end too, before them. When the groups looked at gave nothing, the next ones
-- in the rotation are looked at once more. Honours the queue's own pause, hold and global
-- concurrency (psyq_group_queue_room); a queue with a rate limit of its own (meta `max`,
-- or the worker's queue limiter p_qmax per p_qduration ms) is taken token by token
-- (psyq_group_take_each). A group's own settings override the worker's (p_concurrency;
-- p_max per p_duration ms). Events: active per job taken, as fast.sql writes them (the
-- queue's event policy, the coalesced NOTIFY, trimming in chunks).
CREATE OR REPLACE FUNCTION psyq_group_take(
  p_queue text, p_tokens text[], p_lock_ms bigint, p_name text,
  p_concurrency integer, p_max integer, p_duration bigint,
  p_qmax integer, p_qduration bigint
) RETURNS SETOF job
-- enable_sort off: the lines are read along their index (a line's first jobs, as many as
-- the group's room); a planner without statistics, which cannot tell how many that is,
-- would otherwise read every line's jobs through the delayed-jobs index and sort them.
-- jit off: the sorts left (no other way) cost the planner's "disabled" penalty, far past
-- the JIT thresholds, and compiling the statement takes seconds a call
LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_sort = off SET jit = off AS $$
DECLARE
  v_now    bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
  v_free   boolean := p_concurrency IS NULL AND p_max IS NULL;
  v_want   integer;
  v_got    integer := 0;
  v_share  integer;
  v_found  bigint;
  v_groups text[];
BEGIN
  IF p_qmax IS NOT NULL
     OR EXISTS (SELECT 1 FROM meta WHERE queue = p_queue AND field = 'max') THEN
    RETURN QUERY SELECT * FROM psyq_group_take_each(p_queue, p_tokens, p_lock_ms, p_name,
                                                    p_concurrency, p_max, p_duration,
                                                    p_qmax, p_qduration);
    RETURN;
  END IF;
  v_want := LEAST(COALESCE(cardinality(p_tokens), 0),
                  COALESCE(psyq_group_queue_room(p_queue, v_now, p_qmax),
                           cardinality(p_tokens)));
  FOR v_round IN 1..4 LOOP
    EXIT WHEN v_want - v_got <= 0;
    -- the groups first, in a statement of their own: the take's statement then reads
    -- their active jobs in a snapshot taken with their rows held (a take that moved jobs
    -- of one of them to active has committed). A group with a limit (the worker's, or its
    -- own) is held for the take, and skipped while another take holds it; without one
    -- (the worker gives none, the group has none of its own) only its jobs are locked,
    -- so takes that run at once share the groups.
    SELECT array_agg(c.group_id ORDER BY c.turn) INTO v_groups
      FROM (SELECT g.group_id, g.turn,
                   NOT v_free OR g.concurrency IS NOT NULL OR g.limit_max IS NOT NULL
                     AS limited
              FROM psyq_group_turns(p_queue, v_now, v_want - v_got) AS g) AS c
     WHERE NOT c.limited
        OR EXISTS (SELECT 1 FROM psyq_group h
                    WHERE h.queue = p_queue AND h.group_id = c.group_id
                      FOR UPDATE SKIP LOCKED);
    EXIT WHEN v_groups IS NULL;
    -- each group's share of the tokens this round: the rounds after take what the groups
    -- with fewer jobs than their share left
    v_share := ceil((v_want - v_got)::numeric / cardinality(v_groups))::integer;
    RETURN QUERY
    WITH cand AS (
      SELECT g.group_id, held.r, g.concurrency, g.limit_max, g.points, g.window_end
        FROM unnest(v_groups) WITH ORDINALITY AS held(group_id, r)
       -- each row by the primary key: a LATERAL with LIMIT is not flattened into a join,
       -- which a planner without statistics makes a scan of the queue's groups
       CROSS JOIN LATERAL (SELECT * FROM psyq_group g
                            WHERE g.queue = p_queue AND g.group_id = held.group_id
                            LIMIT 1) AS g
    ), sized AS (
      -- room: how many jobs the group may start now (LEAST skips a NULL: no such bound)
      SELECT cand.group_id, cand.r,
             COALESCE(cand.limit_max, p_max) AS most,
             LEAST(v_share,
                   CASE WHEN COALESCE(cand.concurrency, p_concurrency) IS NOT NULL
                        THEN COALESCE(cand.concurrency, p_concurrency)
                             - (SELECT count(*) FROM job
                                 WHERE job.queue = p_queue AND job.psyq_group = cand.group_id
                                   AND job.state = 'active') END,
                   CASE WHEN cand.window_end <= v_now THEN COALESCE(cand.limit_max, p_max)
                        ELSE COALESCE(cand.limit_max, p_max) - cand.points END) AS room
        FROM cand
    ), lines AS (
      SELECT sized.group_id, sized.r, h.id, h.tid,
             row_number() OVER (PARTITION BY sized.group_id
                                ORDER BY h.psyq_group_priority, h.seq) AS k
        FROM sized
       CROSS JOIN LATERAL (
             SELECT job.id, job.ctid AS tid, job.psyq_group_priority, job.seq FROM job
              WHERE job.queue = p_queue AND job.psyq_group = sized.group_id
                AND job.state = 'delayed' AND job.process_at_ms IS NULL
              ORDER BY job.psyq_group_priority, job.seq
              LIMIT GREATEST(sized.room, 0)
                FOR UPDATE OF job SKIP LOCKED) AS h
    ), slot AS (
      SELECT lines.group_id, lines.id, lines.tid,
             row_number() OVER (ORDER BY lines.k, lines.r) AS n
        FROM lines
       ORDER BY lines.k, lines.r
       LIMIT v_want - v_got
    ), taken AS (
      UPDATE job
         SET state = 'active', lock_token = p_tokens[v_got + slot.n],
             locked_until_ms = v_now + p_lock_ms, processed_at_ms = v_now,
             processed_by = p_name, attempts_started = job.attempts_started + 1
        FROM slot
       -- each job found by the row `lines` locked (its ctid, which the lock keeps): by the
       -- queue's primary key range a planner without statistics (a table never analysed:
       -- autovacuum off, or not yet run) would read every job of the queue, and with
       -- `state = 'delayed'` the delayed jobs' index
       WHERE job.ctid = ANY (ARRAY(SELECT slot.tid FROM slot)) AND job.ctid = slot.tid
         AND job.id = slot.id
         AND job.state::text = 'delayed' AND job.process_at_ms IS NULL
      RETURNING job AS j, slot.n, slot.group_id
    ), gave AS (
      SELECT taken.group_id, count(*) AS jobs, max(taken.n) AS last
        FROM taken GROUP BY taken.group_id
    ), moved AS MATERIALIZED (
      SELECT sized.group_id, sized.most, COALESCE(gave.jobs, 0) AS jobs
        FROM sized LEFT JOIN gave ON gave.group_id = sized.group_id
       WHERE gave.group_id IS NOT NULL OR sized.room <= 0
       ORDER BY gave.group_id IS NOT NULL, COALESCE(gave.last, sized.r)
    ), numbered AS (
      SELECT moved.*, nextval('psyq_group_turn') AS turn FROM moved
    ), movable AS (
      -- the rows this take holds, and those of groups without a limit no other take holds
      -- now (one that does moves the group itself)
      SELECT g.group_id FROM psyq_group g
       WHERE g.queue = p_queue AND g.group_id = ANY (ARRAY(SELECT group_id FROM numbered))
         FOR UPDATE SKIP LOCKED
    ), bumped AS (
      -- a window opened here starts when the statement ends, as its jobs are handed out,
      -- and 10 ms later: the reply's way to the worker (a later take's reply may arrive
      -- sooner, and its jobs would start less than a window after these)
      UPDATE psyq_group g
         SET turn = numbered.turn,
             points = CASE WHEN numbered.jobs = 0 OR numbered.most IS NULL THEN g.points
                           WHEN g.window_end <= v_now THEN numbered.jobs
                           ELSE g.points + numbered.jobs END,
             window_end = CASE WHEN numbered.jobs = 0 OR numbered.most IS NULL
                               THEN g.window_end
                               WHEN g.window_end <= v_now
                               THEN (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                                    + 10 + COALESCE(g.limit_duration, p_duration, 0)
                               ELSE g.window_end END
        FROM numbered JOIN movable ON movable.group_id = numbered.group_id
       WHERE g.queue = p_queue AND g.group_id = numbered.group_id
      RETURNING 1
    ), quiet AS (
      SELECT EXISTS (SELECT 1 FROM meta
                      WHERE queue = p_queue AND field = 'psyq.events' AND value = 'when-read')
             AND NOT EXISTS (SELECT 1 FROM psyq_event_reader
                              WHERE queue = p_queue AND expires > v_now) AS unread
    ), written AS (
      INSERT INTO event (queue, event, data, created_at_ms)
      SELECT p_queue, 'active', jsonb_build_object('jobId', (taken.j).id, 'prev', 'waiting'),
             v_now
        FROM taken
       WHERE NOT (SELECT unread FROM quiet)
       ORDER BY taken.n
      RETURNING id
    ), bound AS (
      SELECT COALESCE((SELECT value::integer FROM meta
                        WHERE queue = p_queue AND field = 'opts.maxLenEvents'), 10000) AS max_len,
             (SELECT max(id) FROM written) AS newest,
             EXISTS (SELECT 1 FROM written WHERE id % 256 = 0) AS crossed
    ), trim_to AS (
      SELECT newest - max_len AS upto FROM bound
       WHERE CASE WHEN crossed AND max_len > 0 AND newest > max_len
                  THEN pg_try_advisory_xact_lock(hashtext('bullmq:evtrim:' || p_queue))
                  ELSE false END
    ), trimmed AS (
      DELETE FROM event
       WHERE EXISTS (SELECT 1 FROM trim_to)
         AND queue = p_queue AND id <= (SELECT upto FROM trim_to)
      RETURNING 1
    ), woken AS (
      SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM written) THEN 0
                  WHEN pg_try_advisory_xact_lock(hashtext('bullmq:evnotify:' || p_queue))
                  THEN (SELECT count(*) FROM (SELECT pg_notify('bullmq_events', p_queue)) AS ev)
                  ELSE 0 END AS sent
    )
    SELECT (taken.j).* FROM taken
     WHERE (SELECT sent FROM woken) IS NOT NULL
       AND (SELECT count(*) FROM bumped) >= 0
       AND (SELECT count(*) FROM trimmed) >= 0
     ORDER BY taken.n;
    GET DIAGNOSTICS v_found = ROW_COUNT;
    v_got := v_got + v_found;
    -- a round that took nothing found its groups not ready (now at the end): the next
    -- ones are looked at once
    EXIT WHEN v_found = 0 AND v_round > 1;
  END LOOP;
END;
$$;

-- psyq_group_admit: an add's group bookkeeping, before its rows are written (in the same
-- statement or transaction). Per job of the batch, in its order: its queue, its group
-- (NULL: none), its group's maxSize (NULL: none) and whether it enters its group's line
-- now. The rows of the groups it puts jobs in (or that give a maxSize) are made, or given
-- a new version, in (queue, group) order (new groups take their turns in the batch's
-- order), and so held until the add commits; then, with the rows held, each job with a
-- maxSize is counted with the jobs already in its group's line and those before it in the
-- batch: one past it raises PQG01 naming the queue, group and maxSize (DETAIL, JSON), and
-- nothing of the statement is written.
CREATE OR REPLACE FUNCTION psyq_group_admit(
  p_queues text[], p_groups text[], p_sizes integer[], p_enters boolean[]
) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  v_over record;
BEGIN
  IF p_groups IS NULL THEN
    RETURN true;
  END IF;
  INSERT INTO psyq_group AS g (queue, group_id, turn)
  SELECT w.queue, w.group_id, w.turn
    FROM (SELECT f.queue, f.group_id, nextval('psyq_group_turn') AS turn
            FROM (SELECT e.queue, e.group_id, min(e.n) AS first
                    FROM unnest(p_queues, p_groups, p_sizes, p_enters)
                         WITH ORDINALITY AS e(queue, group_id, size, enters, n)
                   WHERE e.group_id IS NOT NULL AND (e.enters OR e.size IS NOT NULL)
                   GROUP BY e.queue, e.group_id
                   ORDER BY first) AS f) AS w
   ORDER BY w.queue, w.group_id
  ON CONFLICT (queue, group_id) DO UPDATE SET turn = g.turn;
  IF NOT EXISTS (SELECT 1 FROM unnest(p_sizes) AS s(size) WHERE s.size IS NOT NULL) THEN
    RETURN true;
  END IF;
  SELECT e.queue, e.group_id, e.size INTO v_over
    FROM (SELECT e.*, count(*) OVER (PARTITION BY e.queue, e.group_id ORDER BY e.n) AS upto
            FROM unnest(p_queues, p_groups, p_sizes, p_enters)
                 WITH ORDINALITY AS e(queue, group_id, size, enters, n)
           WHERE e.group_id IS NOT NULL) AS e
   WHERE e.size IS NOT NULL
     AND e.upto + (SELECT count(*) FROM job
                    WHERE job.queue = e.queue AND job.psyq_group = e.group_id
                      AND job.state = 'delayed' AND job.process_at_ms IS NULL) > e.size
   ORDER BY e.n
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'group % of queue % is at its maxSize %', v_over.group_id, v_over.queue,
                    v_over.size
      USING ERRCODE = 'PQG01',
            DETAIL = json_build_object('queue', v_over.queue, 'group', v_over.group_id,
                                       'maxSize', v_over.size)::text;
  END IF;
  RETURN true;
END;
$$;

-- The maxSize check of the layout's entries (`{"queue", "opts": {"group": ...}}`, as
-- add_jobs_bulk and add_flow take them) before any is written: psyq_group_admit of those
-- naming a group (adding.sql's bulk and flow statements).
CREATE OR REPLACE FUNCTION psyq_group_admit_entries(p_entries jsonb) RETURNS boolean
LANGUAGE sql SET search_path FROM CURRENT AS $$
  SELECT psyq_group_admit(
           array_agg(given.entry ->> 'queue' ORDER BY n),
           array_agg(given.entry -> 'opts' -> 'group' ->> 'id' ORDER BY n),
           array_agg((given.entry -> 'opts' -> 'group' ->> 'maxSize')::integer ORDER BY n),
           array_agg(false ORDER BY n))
    FROM jsonb_array_elements(p_entries) WITH ORDINALITY AS given(entry, n)
   WHERE given.entry -> 'opts' ? 'group'
$$;

-- name: take
-- $1 queue, $2 tokens, $3 lock ms, $4 worker name, $5 the worker's group concurrency,
-- $6, $7 the worker's group limit (max, duration ms), $8, $9 its queue limiter -> the
-- rows taken, in token order.
SELECT * FROM psyq_group_take($1::text, $2::text[], $3::bigint, $4::text, $5::integer,
                              $6::integer, $7::bigint, $8::integer, $9::bigint);

-- name: has_groups
-- $1 queue -> whether any group of the queue has a row, or a delayed job will enter one.
SELECT EXISTS (SELECT 1 FROM psyq_group WHERE queue = $1)
    OR EXISTS (SELECT 1 FROM job
                WHERE queue = $1 AND state = 'delayed' AND process_at_ms IS NOT NULL
                  AND opts ? 'group');

-- name: ready_in
-- $1 queue, $2 the worker's group concurrency, $3 its group limit's max -> 0 when a group
-- can give a job now, ms until a limited group's window ends, -1 when groups wait only
-- for a slot (a finishing job frees one), NULL when no group can ever give one without a
-- notification (none waiting, paused ones only, or the queue paused).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), waiting AS (
  SELECT g.*, psyq_group_ready(g, clock.now, $2::integer, $3::integer) AS ready,
         GREATEST(g.parked_until,
                  CASE WHEN g.points >= COALESCE(g.limit_max, $3::integer)
                       THEN g.window_end ELSE 0 END) - clock.now AS wait_ms
    FROM psyq_group g, clock
   WHERE g.queue = $1 AND NOT g.paused
     AND psyq_group_has_line($1, g.group_id)
)
SELECT CASE
         WHEN EXISTS (SELECT 1 FROM meta
                       WHERE queue = $1 AND field = 'paused' AND value = '1') THEN NULL
         WHEN bool_or(ready) THEN 0
         WHEN min(wait_ms) FILTER (WHERE wait_ms > 0) IS NOT NULL
           THEN min(wait_ms) FILTER (WHERE wait_ms > 0)
         WHEN count(*) > 0 THEN -1
       END
  FROM waiting;

-- name: settings
-- $1 queue, $2 group -> the group's row (NULL fields when it has none).
SELECT * FROM psyq_group WHERE queue = $1 AND group_id = $2;

-- name: set_concurrency
-- $1 queue, $2 group, $3 concurrency (NULL: the worker's; then `tidy`).
WITH set AS (
  INSERT INTO psyq_group (queue, group_id, turn, concurrency)
  VALUES ($1, $2, nextval('psyq_group_turn'), $3::integer)
  ON CONFLICT (queue, group_id) DO UPDATE SET concurrency = EXCLUDED.concurrency
  RETURNING 1
)
SELECT count(*) FROM set;

-- name: set_rate_limit
-- $1 queue, $2 group, $3 max, $4 duration ms (both NULL: the worker's).
WITH set AS (
  INSERT INTO psyq_group (queue, group_id, turn, limit_max, limit_duration)
  VALUES ($1, $2, nextval('psyq_group_turn'), $3::integer, $4::bigint)
  ON CONFLICT (queue, group_id)
  DO UPDATE SET limit_max = EXCLUDED.limit_max, limit_duration = EXCLUDED.limit_duration
  RETURNING 1
)
SELECT count(*) FROM set;

-- name: park
-- $1 queue, $2 group, $3 ms: no job of the group is taken until then.
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
)
INSERT INTO psyq_group (queue, group_id, turn, parked_until)
SELECT $1, $2, nextval('psyq_group_turn'), clock.now + $3::bigint FROM clock
ON CONFLICT (queue, group_id) DO UPDATE SET parked_until = EXCLUDED.parked_until;

-- name: rate_limit_ttl
-- $1 queue, $2 group -> ms until the group's rate limit ends (0: not limited).
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
)
SELECT COALESCE(
         (SELECT GREATEST(g.parked_until - clock.now,
                          CASE WHEN g.points >= g.limit_max
                               THEN g.window_end - clock.now ELSE 0 END, 0)
            FROM psyq_group g WHERE g.queue = $1 AND g.group_id = $2), 0)
  FROM clock;

-- name: pause
-- $1 queue, $2 group, $3 paused -> whether it changed. A resumed group wakes the workers.
WITH before AS (
  SELECT COALESCE((SELECT paused FROM psyq_group WHERE queue = $1 AND group_id = $2),
                  false) AS paused
), set AS (
  INSERT INTO psyq_group (queue, group_id, turn, paused)
  SELECT $1, $2, nextval('psyq_group_turn'), $3::boolean FROM before
   WHERE before.paused <> $3::boolean
  ON CONFLICT (queue, group_id) DO UPDATE SET paused = EXCLUDED.paused
  RETURNING 1
), woken AS (
  SELECT pg_notify('bullmq_jobs', $1) FROM set WHERE NOT $3::boolean
)
SELECT EXISTS (SELECT 1 FROM set) AS changed, (SELECT count(*) FROM woken) AS woken;

-- name: tidy
-- $1 queue, $2 group: its row goes when it has no job and no setting of its own.
SELECT psyq_group_tidy($1::text, $2::text);

-- name: jobs
-- $1 queue, $2 group, $3 offset, $4 most rows (NULL: all) -> the group's waiting jobs in
-- the order they will be taken.
SELECT * FROM job
 WHERE queue = $1 AND psyq_group = $2 AND state = 'delayed' AND process_at_ms IS NULL
 ORDER BY psyq_group_priority, seq
OFFSET $3 LIMIT $4;

-- name: line_count
-- $1 queue, $2 group (NULL: every group) -> jobs waiting in groups.
SELECT count(*) FROM job
 WHERE queue = $1 AND psyq_group IS NOT NULL AND ($2::text IS NULL OR psyq_group = $2)
   AND state = 'delayed' AND process_at_ms IS NULL;

-- name: active_count
-- $1 queue, $2 group -> its active jobs.
SELECT count(*) FROM job WHERE queue = $1 AND psyq_group = $2 AND state = 'active';

-- name: counts_per_priority
-- $1 queue, $2 group, $3 group priorities -> waiting jobs of the group per priority.
SELECT count(job.id)
  FROM unnest($3::integer[]) WITH ORDINALITY AS asked(priority, n)
  LEFT JOIN job ON job.queue = $1 AND job.psyq_group = $2 AND job.state = 'delayed'
                AND job.process_at_ms IS NULL AND job.psyq_group_priority = asked.priority
 GROUP BY asked.n
 ORDER BY asked.n;

-- name: list
-- $1 queue, $2 offset, $3 most rows (NULL: all) -> (id, waiting, active, status) of the
-- groups with jobs or settings of their own, by id; and `total`, how many in all.
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), counted AS (
  SELECT g.*,
         (SELECT count(*) FROM job
           WHERE job.queue = $1 AND job.psyq_group = g.group_id AND job.state = 'delayed'
             AND job.process_at_ms IS NULL) AS waiting,
         (SELECT count(*) FROM job
           WHERE job.queue = $1 AND job.psyq_group = g.group_id
             AND job.state = 'active') AS active
    FROM psyq_group g WHERE g.queue = $1
), shown AS (
  SELECT counted.*, count(*) OVER () AS total FROM counted
   WHERE waiting > 0 OR active > 0 OR concurrency IS NOT NULL OR limit_max IS NOT NULL
      OR paused
)
SELECT group_id AS id, waiting, active, total,
       CASE WHEN paused THEN 'paused'
            WHEN parked_until > clock.now
                 OR (window_end > clock.now AND points >= limit_max) THEN 'limited'
            WHEN active >= concurrency THEN 'full'
            ELSE 'waiting' END AS status
  FROM shown, clock
 ORDER BY group_id
OFFSET $2 LIMIT $3;

-- name: expose
-- $1 queue: for the rest of the transaction the queue's grouped waiting jobs are the
-- layout's waiting jobs (its drain and clean then treat them as the waiting jobs they
-- are), until `hide` puts those left back in their lines.
WITH off AS (
  SELECT set_config('psyq.group_lines', 'off', true)
)
UPDATE job SET state = 'waiting'
  FROM off
 WHERE queue = $1 AND psyq_group IS NOT NULL AND state = 'delayed'
   AND process_at_ms IS NULL;

-- name: hide
-- $1 queue: after `expose`, the grouped jobs still waiting back in their lines, and their
-- groups' rows back where the trigger tidied them away while the lines were lent (a
-- clean that left some of a group's jobs), at the end of the rotation.
WITH back AS (
  SELECT set_config('psyq.group_lines', 'on', true)
), hidden AS (
  UPDATE job SET state = 'delayed', process_at_ms = NULL
    FROM back
   WHERE queue = $1 AND psyq_group IS NOT NULL AND state = 'waiting'
  RETURNING psyq_group
)
INSERT INTO psyq_group (queue, group_id, turn)
SELECT $1, lined.psyq_group, nextval('psyq_group_turn')
  FROM (SELECT DISTINCT psyq_group FROM hidden ORDER BY psyq_group) AS lined
ON CONFLICT (queue, group_id) DO NOTHING;

-- name: forget_queue
-- $1 queue: every group row of an obliterated queue goes, settings too.
DELETE FROM psyq_group WHERE queue = $1;

-- name: settings_of_queue
-- $1 queue -> the groups with settings of their own (for the queue's meta).
SELECT group_id, concurrency, limit_max, limit_duration, paused FROM psyq_group
 WHERE queue = $1
   AND (concurrency IS NOT NULL OR limit_max IS NOT NULL OR paused)
 ORDER BY group_id;

-- name: set_settings
-- $1 queue, $2 group, $3 concurrency, $4 limit max, $5 limit duration, $6 paused.
INSERT INTO psyq_group (queue, group_id, turn, concurrency, limit_max, limit_duration,
                        paused)
VALUES ($1, $2, nextval('psyq_group_turn'), $3::integer, $4::integer, $5::bigint,
        $6::boolean)
ON CONFLICT (queue, group_id)
DO UPDATE SET concurrency = EXCLUDED.concurrency, limit_max = EXCLUDED.limit_max,
              limit_duration = EXCLUDED.limit_duration, paused = EXCLUDED.paused;

-- name: sweep
-- $1 queue -> how many rows of groups with no job and nothing of their own were looked at
-- (each goes unless the group has a job again: psyq_group_tidy): rows kept for a rate
-- window or a park that has since ended, and rows two completions left behind (each ran
-- while the other's job was still active). Run with the stalled check, so an emptied
-- group's row does not outlive its window for long.
WITH clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now
), ended AS (
  SELECT g.queue, g.group_id FROM psyq_group g, clock
   WHERE g.queue = $1 AND g.concurrency IS NULL AND g.limit_max IS NULL AND NOT g.paused
     AND g.window_end <= clock.now AND g.parked_until <= clock.now
     AND NOT psyq_group_has_line($1, g.group_id)
     AND NOT EXISTS (SELECT 1 FROM job
                      WHERE job.queue = $1 AND job.psyq_group = g.group_id
                        AND job.state = 'active')
   LIMIT 1000
     FOR UPDATE OF g SKIP LOCKED
)
SELECT count(psyq_group_tidy(ended.queue, ended.group_id)::text) FROM ended;
