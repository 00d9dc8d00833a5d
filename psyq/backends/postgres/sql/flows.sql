-- add_flow / get_flow / move_to_waiting_children / get_dependencies: job trees.
-- Parameters: per statement. Effects: deps rows link a parent ($1 parent qkey, $2 parent
-- id) to its children by key; a child's end updates its row (processed with its value,
-- failed / ignored with its reason, or deleted). Events: waiting-children, waiting
-- (prev waiting-children), failed, written by the caller. Return codes: PENDING_CHILDREN.

-- name: set_link
-- $3 child key, $4 status, $5 value
UPDATE deps SET status = $4, value = $5
WHERE parent_qkey = $1 AND parent_id = $2 AND child_key = $3;

-- name: drop_link
-- $3 child key. Drops a pending link; returns a row when there was one.
DELETE FROM deps
WHERE parent_qkey = $1 AND parent_id = $2 AND child_key = $3 AND status = 'pending'
RETURNING status;

-- name: pending_count
SELECT count(*) FROM deps WHERE parent_qkey = $1 AND parent_id = $2 AND status = 'pending';

-- name: links
-- Pending children first (by key), then the others.
SELECT child_key, status, value FROM deps
WHERE parent_qkey = $1 AND parent_id = $2
ORDER BY status <> 'pending', child_key;
