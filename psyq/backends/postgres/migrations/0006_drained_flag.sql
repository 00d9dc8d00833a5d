-- 0006_drained_flag: a queue's "drained" flag (set when a fetch finds no job, cleared when
-- one is taken) gets a row of its own. On the queue row, the flag's updates held the row
-- lock every add needs for its ids until the settle that set it committed, so an add
-- waited for a worker's commit each time an idle queue received a job. A queue without a
-- row here is drained.
CREATE TABLE queue_drained (
    qkey text PRIMARY KEY,
    drained boolean NOT NULL
);
INSERT INTO queue_drained (qkey, drained) SELECT qkey, drained FROM queues WHERE NOT drained;
ALTER TABLE queues DROP COLUMN drained;
