-- 0007_events_without_key_index: events lose their primary key index on id. Every event
-- is written once and numbered once (each a new row version), and nothing looks an event
-- up by id: the sequencer orders unnumbered events by events_unsequenced (qkey, id) and
-- numbers them by their row address, readers use events_by_seq. The index cost one
-- insertion per row version, a quarter of the index work of an event.
ALTER TABLE events DROP CONSTRAINT events_pkey;
