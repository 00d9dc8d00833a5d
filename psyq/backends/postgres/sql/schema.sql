-- The schema and its ledger (BullMQ's `migration` table), read and written by schema.py.
-- BullMQ's migration files themselves come from the installed `bullmq` package; the
-- statements here only lock, create the namespace, and read or extend the ledger.

-- name: lock
-- $1 schema. Serialises migrators of one schema: the key pair every BullMQ client takes
-- (0x42554c4c, "BULL", and the hash of the schema's name), released at commit.
SELECT pg_advisory_xact_lock(1112493644, hashtext($1::text));

-- name: create_schema_statement
-- $1 schema -> the CREATE SCHEMA statement, the name quoted by the server.
SELECT format('CREATE SCHEMA IF NOT EXISTS %I', $1::text);

-- name: search_path_statement
-- $1 schema -> the statement that points unqualified names at it for this transaction.
SELECT format('SET LOCAL search_path TO %I', $1::text);

-- name: ledger_exists
-- $1 schema -> whether the schema has a ledger (a BullMQ client migrated it once).
SELECT to_regclass(format('%I.migration', $1::text)) IS NOT NULL;

-- name: ledger
-- -> the newest applied version and the largest minimum client major (NULL when the
-- ledger has no such column: bullmq for Python 3.4 writes it without one).
SELECT COALESCE(max(version), 0)::int AS version,
       max((to_jsonb(applied) ->> 'min_client_version')::int) AS min_client_version
  FROM migration AS applied;

-- name: create_ledger
-- The ledger as Node BullMQ 6 creates it, for a schema psyq creates first.
CREATE TABLE IF NOT EXISTS migration (
  version            integer PRIMARY KEY,
  name               text NOT NULL,
  min_client_version integer NOT NULL,
  applied_at         timestamptz NOT NULL DEFAULT now()
);

-- name: ledger_client_column
-- A ledger written without the minimum-client column gets it (Node BullMQ 6 does the same).
ALTER TABLE migration ADD COLUMN IF NOT EXISTS min_client_version integer;

-- name: record
-- $1 version, $2 name, $3 minimum client major: one applied migration.
INSERT INTO migration (version, name, min_client_version) VALUES ($1, $2, $3);
