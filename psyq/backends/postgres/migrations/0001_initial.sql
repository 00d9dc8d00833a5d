-- 0001_initial: the tables of the Postgres backend.
-- Runs with search_path set to the backend's schema (default psyq), inside the migration
-- transaction that holds the schema's advisory lock. Names are unqualified on purpose.

CREATE SEQUENCE job_seq;

-- The store's clock: ms since the epoch at the start of the transaction.
CREATE FUNCTION now_ms() RETURNS bigint LANGUAGE sql STABLE
AS $$ SELECT (extract(epoch FROM now()) * 1000)::bigint $$;

CREATE TABLE queues (
    qkey text PRIMARY KEY,                 -- "<prefix>:<queue>"
    name text NOT NULL,
    last_id bigint NOT NULL DEFAULT 0,     -- auto ids
    paused boolean NOT NULL DEFAULT false,
    drained boolean NOT NULL DEFAULT true,
    event_seq bigint NOT NULL DEFAULT 0,   -- sequence of the newest event
    max_len_events integer NOT NULL DEFAULT 10000,
    limited_until bigint NOT NULL DEFAULT 0,
    window_start bigint NOT NULL DEFAULT 0,
    window_count integer NOT NULL DEFAULT 0,
    global_max integer,
    global_duration integer,
    global_concurrency integer
);

CREATE TABLE jobs (
    qkey text NOT NULL,
    id text NOT NULL,
    name text NOT NULL,
    data text NOT NULL,                    -- JSON text, as BullMQ stores it
    opts jsonb NOT NULL DEFAULT '{}',
    timestamp bigint NOT NULL,
    delay bigint NOT NULL DEFAULT 0,
    priority integer NOT NULL DEFAULT 0,
    progress jsonb NOT NULL DEFAULT '0',
    attempts_made integer NOT NULL DEFAULT 0,
    attempts_started integer NOT NULL DEFAULT 0,
    stalled_counter integer NOT NULL DEFAULT 0,
    processed_on bigint,
    finished_on bigint,
    returnvalue text,
    failed_reason text,
    stacktrace jsonb NOT NULL DEFAULT '[]',
    parent_key text,
    processed_by text,
    state text NOT NULL,
    seq bigint NOT NULL,                   -- order within the state (negative: lifo/front)
    due bigint,                            -- delayed: when it becomes ready
    lock_token text,
    lock_expires bigint,
    cancel_reason text,
    PRIMARY KEY (qkey, id)
);

-- The fetch: plain waiting (priority 0) before prioritized, then by sequence.
CREATE INDEX jobs_ready ON jobs (qkey, priority, seq) WHERE state IN ('waiting', 'prioritized');
CREATE INDEX jobs_delayed ON jobs (qkey, due) WHERE state = 'delayed';
CREATE INDEX jobs_active ON jobs (qkey, lock_expires) WHERE state = 'active';
CREATE INDEX jobs_by_state ON jobs (qkey, state, seq);

CREATE TABLE logs (
    qkey text NOT NULL,
    job_id text NOT NULL,
    seq bigserial,
    row text NOT NULL,
    PRIMARY KEY (qkey, job_id, seq)
);

-- Flow links: one row per (parent, child).
CREATE TABLE deps (
    parent_qkey text NOT NULL,
    parent_id text NOT NULL,
    child_key text NOT NULL,               -- "<prefix>:<queue>:<id>"
    status text NOT NULL,                  -- pending | processed | failed | ignored
    value text,                            -- return value JSON, or failed reason
    PRIMARY KEY (parent_qkey, parent_id, child_key)
);

CREATE TABLE events (
    qkey text NOT NULL,
    seq bigint NOT NULL,
    ms bigint NOT NULL,
    event text NOT NULL,
    job_id text,
    fields jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (qkey, seq)
);

CREATE TABLE dedup (
    qkey text NOT NULL,
    dedup_id text NOT NULL,
    job_id text NOT NULL,
    expires bigint,
    PRIMARY KEY (qkey, dedup_id)
);

CREATE TABLE schedulers (
    qkey text NOT NULL,
    id text NOT NULL,
    spec jsonb NOT NULL,
    template_name text NOT NULL,
    template_data text NOT NULL,
    template_opts jsonb NOT NULL,
    iteration_count integer NOT NULL DEFAULT 0,
    next_ms bigint,
    pending text,
    PRIMARY KEY (qkey, id)
);

CREATE TABLE metrics (
    qkey text NOT NULL,
    kind text NOT NULL,
    minute bigint NOT NULL,
    count integer NOT NULL,
    PRIMARY KEY (qkey, kind, minute)
);

CREATE TABLE workers (
    qkey text NOT NULL,
    name text NOT NULL,
    info jsonb NOT NULL,
    started bigint NOT NULL,
    PRIMARY KEY (qkey, name)
);
