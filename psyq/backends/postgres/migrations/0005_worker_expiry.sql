-- 0005_worker_expiry: worker registry entries expire. A running worker's backend renews its
-- entry (heartbeat) every third of the TTL; get_workers lists only entries not yet expired,
-- so a worker that died stops being listed after its TTL. Entries written before this
-- migration get one default TTL (60 s) to be renewed in.
ALTER TABLE workers ADD COLUMN expires bigint;
UPDATE workers SET expires = now_ms() + 60000;
ALTER TABLE workers ALTER COLUMN expires SET NOT NULL;
CREATE INDEX workers_by_expiry ON workers (qkey, expires);
