-- 0010_bytewise_text: every text column compares byte by byte (COLLATE "C"), as Redis
-- compares keys. Under a database's linguistic collation (even C.UTF-8, whose order is the
-- same as the bytes' for UTF-8), PostgreSQL compares two texts through the locale library:
-- a lookup of the collation, copies into terminated buffers, strcoll; "C" is one memcmp.
-- The keys of every index are text (queue key, job id, state), so that was a large part of
-- each index insertion and lookup: an import page of 1,000 jobs spent about a sixth of its
-- server time there. Orders by text (queue names, scheduler ids, child keys) become the
-- bytes' order, BullMQ's own. The change rewrites no table; the indexes on these columns are
-- rebuilt, once per table. Every text column changes, so any two still compare without a
-- collation conflict.
ALTER TABLE queues
    ALTER COLUMN qkey TYPE text COLLATE "C",
    ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE jobs
    ALTER COLUMN qkey TYPE text COLLATE "C",
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN name TYPE text COLLATE "C",
    ALTER COLUMN data TYPE text COLLATE "C",
    ALTER COLUMN returnvalue TYPE text COLLATE "C",
    ALTER COLUMN failed_reason TYPE text COLLATE "C",
    ALTER COLUMN parent_key TYPE text COLLATE "C",
    ALTER COLUMN processed_by TYPE text COLLATE "C",
    ALTER COLUMN state TYPE text COLLATE "C",
    ALTER COLUMN lock_token TYPE text COLLATE "C",
    ALTER COLUMN cancel_reason TYPE text COLLATE "C";
ALTER TABLE logs
    ALTER COLUMN qkey TYPE text COLLATE "C",
    ALTER COLUMN job_id TYPE text COLLATE "C",
    ALTER COLUMN row TYPE text COLLATE "C";
ALTER TABLE deps
    ALTER COLUMN parent_qkey TYPE text COLLATE "C",
    ALTER COLUMN parent_id TYPE text COLLATE "C",
    ALTER COLUMN child_key TYPE text COLLATE "C",
    ALTER COLUMN status TYPE text COLLATE "C",
    ALTER COLUMN value TYPE text COLLATE "C";
ALTER TABLE events
    ALTER COLUMN qkey TYPE text COLLATE "C",
    ALTER COLUMN event TYPE text COLLATE "C",
    ALTER COLUMN job_id TYPE text COLLATE "C";
ALTER TABLE dedup
    ALTER COLUMN qkey TYPE text COLLATE "C",
    ALTER COLUMN dedup_id TYPE text COLLATE "C",
    ALTER COLUMN job_id TYPE text COLLATE "C";
ALTER TABLE schedulers
    ALTER COLUMN qkey TYPE text COLLATE "C",
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN template_name TYPE text COLLATE "C",
    ALTER COLUMN template_data TYPE text COLLATE "C",
    ALTER COLUMN pending TYPE text COLLATE "C";
ALTER TABLE metrics
    ALTER COLUMN qkey TYPE text COLLATE "C",
    ALTER COLUMN kind TYPE text COLLATE "C";
ALTER TABLE workers
    ALTER COLUMN qkey TYPE text COLLATE "C",
    ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE queue_drained
    ALTER COLUMN qkey TYPE text COLLATE "C";
ALTER TABLE listeners
    ALTER COLUMN key TYPE text COLLATE "C",
    ALTER COLUMN listener TYPE text COLLATE "C";
