-- get_metrics: completed / failed counts per minute, newest first (settles append counts;
-- the events sequencer folds past minutes, see common.fold_metrics).
-- Parameters: $1 qkey, $2 kind. Effects: none.

-- $2 kind. Minutes newest first, with the total and the current minute.
SELECT minute, sum(count) AS count, now_ms() / 60000 AS now_minute FROM metrics
WHERE qkey = $1 AND kind = $2 GROUP BY minute ORDER BY minute DESC;
