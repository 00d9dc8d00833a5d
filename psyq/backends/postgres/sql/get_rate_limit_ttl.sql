-- get_rate_limit_ttl: ms left of the queue's rate-limit hold (0: none).
-- Parameters: $1 qkey. Effects: none.

SELECT greatest(0, COALESCE((SELECT limited_until FROM queues WHERE qkey = $1), 0) - now_ms());
