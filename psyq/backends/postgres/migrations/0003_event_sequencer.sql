-- 0003_event_sequencer: writers append events without a sequence number (no lock shared by
-- the writers of a queue); a sequencer numbers committed events under the queue row's lock
-- before they are read (events.sql), so readers never skip an event that commits late.
ALTER TABLE events DROP CONSTRAINT events_pkey;
ALTER TABLE events ADD COLUMN id bigserial;
ALTER TABLE events ALTER COLUMN seq DROP NOT NULL;
ALTER TABLE events ADD PRIMARY KEY (id);
CREATE UNIQUE INDEX events_by_seq ON events (qkey, seq) WHERE seq IS NOT NULL;
CREATE INDEX events_unsequenced ON events (qkey, id) WHERE seq IS NULL;
