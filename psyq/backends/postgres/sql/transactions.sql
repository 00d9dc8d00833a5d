-- Writing on a connection the application holds inside its own transaction
-- (transaction.py): the backend's statements run there as they are, every name of the
-- layout qualified by its schema ({schema}., statements.py), under the application's
-- search_path, which psyq neither reads nor changes. No events, no NOTIFY.

-- name: identity
-- -> database, started: which database of which server instance the connection is on
-- (the server's start time tells two servers apart). On the pool: where the backend
-- writes.
SELECT current_database() AS database, pg_postmaster_start_time()::text AS started;

-- name: check
-- $1 the layout's schema -> database, started (as identity), layout: whether $1 holds the
-- layout's job table. On the application's connection, once per connection object
-- (transaction.py): a connection stays on its database and server for its life.
SELECT current_database() AS database, pg_postmaster_start_time()::text AS started,
       to_regclass(quote_ident($1::text) || '.job') IS NOT NULL AS layout;
