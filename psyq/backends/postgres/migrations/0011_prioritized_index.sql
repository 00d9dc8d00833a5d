-- 0011_prioritized_index: the fetch reads plain waiting jobs from jobs_by_state (qkey,
-- 'waiting', seq) and prioritized ones from their own partial index, so a waiting job is
-- entered in two indexes instead of three. jobs_ready held both ready states by (priority,
-- seq); its waiting half repeated what jobs_by_state already holds in the same order
-- (a waiting job's priority is always 0). Every add, retry and promotion to waiting wrote
-- that third index entry, and an import of a million waiting jobs spent about a sixth of
-- the server's time on it. The new index is built from the table once (a partial index of
-- prioritized rows: small, but the build reads the whole table under a lock that holds off
-- writers meanwhile).
CREATE INDEX jobs_prioritized ON jobs (qkey, priority, seq) WHERE state = 'prioritized';
DROP INDEX jobs_ready;
