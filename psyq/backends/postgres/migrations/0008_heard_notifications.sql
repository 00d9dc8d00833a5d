-- 0008_heard_notifications: NOTIFY only the keys someone listens for. A commit that has sent
-- a NOTIFY holds a database-wide lock until its WAL flush ends, so notifying commits run
-- one at a time, which caps a busy queue at one commit per flush. A backend that waits on a
-- key ("j:<qkey>": jobs, "e:<qkey>": events) first announces it here (renewed while it keeps
-- waiting, dropped when it closes); transitions notify a key only while an entry for it has
-- not expired. Notifications only wake (waiters time out and re-read), so an announcement
-- that races with a commit costs latency once, never a job or an event.
CREATE TABLE listeners (
    key text NOT NULL,
    listener text NOT NULL,
    expires bigint NOT NULL,
    PRIMARY KEY (key, listener)
);

CREATE FUNCTION notify_heard(channel text, payload text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM listeners WHERE key = payload AND expires > now_ms()) THEN
        PERFORM pg_notify(channel, payload);
    END IF;
END
$$;
