-- pause / resume: the queue's paused flag (resume also wakes workers).
-- Parameters: $1 qkey, $2 paused. Effects: queues.paused. Events: paused | resumed, when
-- the flag changed (written by the caller). Returns: a row when the flag changed.

-- $2 paused (the queue row exists: common.ensure_queue). Returns a row when the flag changed.
UPDATE queues SET paused = $2 WHERE qkey = $1 AND paused <> $2 RETURNING qkey;
