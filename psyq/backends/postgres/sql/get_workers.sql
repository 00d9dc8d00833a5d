-- get_workers: the registered workers whose entry has not expired, oldest first.
-- Parameters: $1 qkey. Effects: none.

SELECT name, info::text AS info, started FROM workers
WHERE qkey = $1 AND expires > now_ms()
ORDER BY started, name;
