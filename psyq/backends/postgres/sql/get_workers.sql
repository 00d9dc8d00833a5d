-- get_workers: the registered workers, oldest first.
-- Parameters: $1 qkey. Effects: none.

SELECT name, info::text AS info, started FROM workers WHERE qkey = $1 ORDER BY started, name;
