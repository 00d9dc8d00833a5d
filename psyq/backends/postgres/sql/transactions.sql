-- Writing on a connection the application holds inside its own transaction
-- (transaction.py): the backend's statements run there, unqualified as on the pool, so the
-- layout's schema leads the search_path until they are done (SET LOCAL: it ends with the
-- application's transaction anyway). No events, no NOTIFY.

-- name: identity
-- (on the pool) -> database, started: which database of which server instance the
-- backend writes in (the server's start time tells two servers apart).
SELECT current_database() AS database, pg_postmaster_start_time()::text AS started;

-- name: enter
-- $1 the layout's schema, $2 the backend's database, $3 its server's start time ->
-- database, started, layout (whether $1 holds the layout's job table), search_path (the
-- connection's, to restore in `leave`). Only when all three match is the search_path set
-- to $1 for the rest of the transaction.
WITH here AS MATERIALIZED (
  SELECT current_database() AS database, pg_postmaster_start_time()::text AS started,
         to_regclass(quote_ident($1::text) || '.job') IS NOT NULL AS layout,
         current_setting('search_path') AS search_path
)
SELECT here.database, here.started, here.layout, here.search_path,
       CASE WHEN here.database = $2::text AND here.started = $3::text AND here.layout
            THEN set_config('search_path', quote_ident($1::text), true) END AS switched
  FROM here;

-- name: leave
-- $1 the search_path `enter` found: back to it for the rest of the transaction.
SELECT set_config('search_path', $1::text, true);
