-- Flows: job trees (added through the layout's add_flow, see adding.sql), read back
-- through the layout's job_dependency rows (owned by the parent, one per child, with the
-- child's status and its return value or failure reason).

-- name: records
-- $1 queues, $2 ids -> the rows of those jobs, in the order asked (missing ones left out).
-- Qualified ({schema}.): it runs on the application's transaction too (a flow's add).
SELECT job.*
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS wanted(queue, id, n)
  JOIN {schema}.job ON job.queue = wanted.queue AND job.id = wanted.id
 ORDER BY wanted.n;

-- name: children
-- $1 parent queue, $2 parent id -> its children: queue, id, key (`<queue>:<id>`), status
-- (pending, processed, failed, ignored), value (JSON text) and whether the child was added
-- with continueParentOnFailure (the layout files such a failure as ignored), pending first.
SELECT d.child_queue, d.child_id, d.child_key, d.status::text AS status,
       d.value::text AS value,
       COALESCE(c.opts->>'continueParentOnFailure' = 'true', false) AS continued
  FROM job_dependency d
  LEFT JOIN job c ON c.queue = d.child_queue AND c.id = d.child_id
 WHERE d.parent_queue = $1 AND d.parent_id = $2
 ORDER BY d.status = 'pending' DESC, d.child_key;

-- name: wait_children
-- $1 queue, $2 id, $3 token -> 1 when the job now waits for children, 0 when none are
-- pending (it stays active). Errors: -1 missing, -2/-6 lock, -3 not active, -9 failed
-- children. Events: waiting-children.
SELECT move_to_waiting_children($1::text, $2::text, $3::text);
