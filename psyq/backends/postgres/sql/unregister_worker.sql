-- unregister_worker: a worker says it stopped.
-- Parameters: $1 qkey, $2 worker name. Events: none.

DELETE FROM workers WHERE qkey = $1 AND name = $2;
