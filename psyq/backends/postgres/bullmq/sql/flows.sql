-- Flows: job trees (added through the layout's add_flow, see adding.sql), read back
-- through the layout's job_dependency rows (owned by the parent, one per child, with the
-- child's status and its return value or failure reason).

-- name: records
-- $1 queues, $2 ids -> the rows of those jobs, in the order asked (missing ones left out).
SELECT job.*
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS wanted(queue, id, n)
  JOIN job ON job.queue = wanted.queue AND job.id = wanted.id
 ORDER BY wanted.n;

-- name: children
-- $1 parent queue, $2 parent id -> its children: queue, id, key (`<queue>:<id>`), status
-- (pending, processed, failed, ignored) and value (JSON text), pending ones first.
SELECT child_queue, child_id, child_key, status::text AS status, value::text AS value
  FROM job_dependency
 WHERE parent_queue = $1 AND parent_id = $2
 ORDER BY status = 'pending' DESC, child_key;

-- name: wait_children
-- $1 queue, $2 id, $3 token -> 1 when the job now waits for children, 0 when none are
-- pending (it stays active). Errors: -1 missing, -2/-6 lock, -3 not active, -9 failed
-- children. Events: waiting-children.
SELECT move_to_waiting_children($1::text, $2::text, $3::text);
