-- Queue administration through the layout's functions.

-- name: pause
-- $1 queue, $2 paused. Events: paused | resumed.
SELECT pause($1::text, $2::boolean);

-- name: drain
-- $1 queue, $2 also delayed jobs.
SELECT drain($1::text, $2::boolean);

-- name: clean
-- $1 queue, $2 state, $3 grace ms, $4 most jobs (0: all) -> the ids removed.
SELECT cleaned.id
  FROM clean($1::text, $2::text,
             (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $3::bigint,
             $4::integer) AS cleaned(id);

-- name: obliterate
-- $1 queue, $2 most jobs per call, $3 force -> 0 done, 1 more to delete, -1 not
-- paused, -2 active jobs (without force).
SELECT obliterate($1::text, $2::integer, $3::boolean);

-- name: retry_jobs
-- $1 queue, $2 state, $3 most jobs (NULL: all), $4 finished before (ms) -> jobs moved.
SELECT retry_jobs($1::text, $2::text, $3::integer, $4::bigint);

-- name: promote_jobs
-- $1 queue, $2 most jobs (NULL: all) -> jobs moved.
SELECT promote_jobs($1::text, $2::integer);
