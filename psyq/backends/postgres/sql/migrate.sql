-- migrate: create and upgrade the backend's schema (psyq/backends/postgres/migrate.py).
-- Parameters: per statement. Effects: the schema, its migration ledger. Events: none.
-- Returns: the applied versions. Every statement runs in one transaction that first takes
-- the schema's advisory lock, so concurrent migrators run one after the other.

-- name: lock
-- $1 schema name. Blocks until no other migrator of this schema is running.
SELECT pg_advisory_xact_lock(hashtext('psyq-migrate:' || $1::text));

-- name: create_schema_statement
-- $1 schema name. Returns the CREATE SCHEMA statement with the name quoted by the server.
SELECT format('CREATE SCHEMA IF NOT EXISTS %I', $1::text);

-- name: ledger
CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: applied
SELECT version FROM schema_migrations ORDER BY version;

-- name: record
-- $1 version, $2 file name
INSERT INTO schema_migrations (version, name) VALUES ($1, $2);
