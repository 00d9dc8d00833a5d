-- 0004_metrics_append_only: settles append their counts (no row shared by the settles of a
-- queue); reads sum per minute, and the events sequencer folds past minutes into one row.
ALTER TABLE metrics DROP CONSTRAINT metrics_pkey;
CREATE INDEX metrics_by_minute ON metrics (qkey, kind, minute);
